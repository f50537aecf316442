package control

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// TestAdmissionRefusesTPLargerThanAServer (issue 29): a requested plan
// whose TP exceeds every server's GPU count can never run (a TP group
// never spans servers); admission refuses it naming file, line and field
// and saying why, and the same job with TP 8 on these 8-GPU servers is
// admitted.
func TestAdmissionRefusesTPLargerThanAServer(t *testing.T) {
	ctx := context.Background()
	cl, _, _ := startAdmitAPI(t)
	spec := admitSpec(map[string]string{"model": "llama7b", "global_batch": "8", "request": `{gpus: 16, plan: "dp=1,tp=16,pp=1,mb=8,ga=1,zero=1"}`})
	_, err := cl.Submit(ctx, "job.yaml", []byte(spec))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusBadRequest {
		t.Fatalf("want 400, got %v", err)
	}
	found := false
	for _, p := range re.Problems {
		if p.File == "job.yaml" && p.Line == 12 && p.Field == "request.plan" && strings.Contains(p.Msg, "TP 16 is more than the 8 GPUs of the largest server") {
			found = true
		}
	}
	if !found {
		t.Fatalf("want job.yaml:12: request.plan: TP 16 is more than the 8 GPUs..., got %+v", re.Problems)
	}
	ok := admitSpec(map[string]string{"model": "llama7b", "global_batch": "8", "request": `{gpus: 16, plan: "dp=2,tp=8,pp=1,mb=4,ga=1,zero=1"}`})
	if _, err := cl.Submit(ctx, "ok.yaml", []byte(ok)); err != nil {
		t.Fatalf("TP 8 on 8-GPU servers refused: %v", err)
	}
}
