package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLaunchRenderJSONContract(t *testing.T) {
	out, err := runCLI(t, "launch", "render", "--job", "../jobspec/testdata/gpt2.yaml", "--plan", "dp=8,tp=1,pp=1,mb=2,ga=1,zero=2", "--servers", "a,b", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got struct {
		Servers []struct {
			Server string            `json:"server"`
			Argv   []string          `json:"argv"`
			Env    map[string]string `json:"env"`
			Files  map[string]string `json:"files"`
		} `json:"servers"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(got.Servers) != 2 || got.Servers[0].Server != "a" || got.Servers[1].Server != "b" {
		t.Fatalf("servers %+v", got.Servers)
	}
	for _, s := range got.Servers {
		if s.Argv[0] != "deepspeed" || s.Env["CUDA_VISIBLE_DEVICES"] != "0,1,2,3" || len(s.Files) != 2 {
			t.Errorf("server %s: argv %v env %v files %d", s.Server, s.Argv, s.Env, len(s.Files))
		}
		for name, content := range s.Files {
			if strings.HasSuffix(name, "ds_config.json") && !strings.Contains(content, `"train_batch_size": 16`) {
				t.Errorf("ds_config: %s", content)
			}
		}
	}
	if _, err := runCLI(t, "launch", "render", "--job", "../jobspec/testdata/gpt2.yaml", "--plan", "dp=8,tp=1,pp=1,mb=4,ga=1", "--servers", "a,b"); err == nil || !strings.Contains(err.Error(), "global-batch") {
		t.Errorf("plan with another batch: %v", err)
	}
	if _, err := runCLI(t, "launch", "render", "--job", "../jobspec/testdata/gpt2.yaml", "--plan", "dp=9", "--servers", "a,b"); err == nil {
		t.Error("9 GPUs over 2 servers: want error")
	}
}
