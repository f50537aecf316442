package dataset

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// The optional labels column: requirements separated by ';', checked with
// file and line, written back as read.
func TestWorkloadLabelsColumn(t *testing.T) {
	in := strings.Join(WorkloadColumns, ",") + ",labels\n" +
		"a,0,60,gpt2,8,64,1,111,10,0,ib-hdr;gpu=a800-80g\n" +
		"b,1,60,gpt2,8,64,1,111,10,0,\n"
	jobs, err := ParseWorkload("w.csv", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := jobs[0].LabelList(); !slices.Equal(got, []string{"ib-hdr", "gpu=a800-80g"}) || jobs[1].LabelList() != nil {
		t.Errorf("labels %v, %v", got, jobs[1].LabelList())
	}
	var out bytes.Buffer
	if err := WriteWorkload(&out, jobs); err != nil {
		t.Fatal(err)
	}
	back, err := ParseWorkload("w2.csv", &out)
	if err != nil || back[0].Labels != jobs[0].Labels || back[1].Labels != "" {
		t.Errorf("round trip: %v %+v", err, back)
	}
	bad := strings.Replace(in, "ib-hdr;gpu=a800-80g", "ib hdr", 1)
	if _, err := ParseWorkload("w.csv", strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), `w.csv:2: labels: label name "ib hdr"`) {
		t.Errorf("bad label: %v", err)
	}
}
