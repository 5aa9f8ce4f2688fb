package merge

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// dupTrace writes a plugin trace of n operations that all repeat one handle, with a proxy op,
// a step and a KernelLaunch each under the same handles: what an audit fed the merge (25, 50,
// 99 MB took 1.9, 11.6, 94.6 s: every operation walked every other one's children).
func dupTrace(t *testing.T, dir string, n int) string {
	var b bytes.Buffer
	b.WriteString(`{"schemaVersion":1,"displayTimeUnit":"ms","baseTimeNanoseconds":1700000000000000000,` + "\n")
	b.WriteString(`"ncclprof":{"format":1,"version":"0.1.0","host":"","pid":100,"clock":{"error_bound_ns":500}},` + "\n")
	b.WriteString(`"traceEvents":[` + "\n")
	b.WriteString(`{"ph":"M","name":"ncclprof_comm","pid":100,"tid":0,"args":{"comm":"0xc0","name":"world","rank":0,"nranks":2}}`)
	for i := 0; i < n; i++ {
		ts := 900 + float64(i)/1000
		fmt.Fprintf(&b, ",\n"+`{"ph":"X","cat":"nccl_api","name":"ncclGroup","pid":100,"tid":101,"ts":%.3f,"dur":0.5,"args":{"id":"0x1","comm":"0xc0","rank":0}}`, ts)
		fmt.Fprintf(&b, ",\n"+`{"ph":"X","cat":"nccl_api","name":"ncclAllReduce","pid":100,"tid":101,"ts":%.3f,"dur":0.1,"args":{"id":"0x2","parent":"0x1","comm":"0xc0","rank":0,"func":"AllReduce","count":1,"datatype":"ncclFloat32"}}`, ts)
		fmt.Fprintf(&b, ",\n"+`{"ph":"X","cat":"nccl_coll","name":"AllReduce","pid":100,"tid":101,"ts":%.3f,"dur":0.1,"args":{"id":"0x3","parent":"0x2","comm":"0xc0","rank":0,"func":"AllReduce","count":1,"datatype":"ncclFloat32"}}`, ts)
		fmt.Fprintf(&b, ",\n"+`{"ph":"X","cat":"nccl_proxy","name":"ProxyOp send","pid":100,"tid":2000000001,"ts":%.3f,"dur":0.1,"args":{"id":"0x4","parent":"0x3","comm":"0xc0","rank":0}}`, ts)
		fmt.Fprintf(&b, ",\n"+`{"ph":"X","cat":"nccl_step","name":"Step 0","pid":100,"tid":2000000001,"ts":%.3f,"dur":0.1,"args":{"id":"0x5","parent":"0x4","comm":"0xc0","rank":0}}`, ts)
		fmt.Fprintf(&b, ",\n"+`{"ph":"X","cat":"nccl_launch","name":"ncclKernelLaunch","pid":100,"tid":101,"ts":%.3f,"dur":0.1,"args":{"id":"0x6","comm":"0xc0","rank":0,"group_api":"0x1"}}`, ts)
	}
	b.WriteString("\n]}\n")
	p := filepath.Join(dir, fmt.Sprintf("dup%d.trace.json", n))
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Duplicated handles cost linear time: 4× the events take well under 16× the time (they took
// the square, and the cube through proxy steps), and the summary counts them.
func TestDuplicateIDsLinear(t *testing.T) {
	dir := t.TempDir()
	merge := func(n int) (time.Duration, *Summary) {
		p := dupTrace(t, dir, n)
		t0 := time.Now()
		sum, err := Run([]string{"testdata/tiny_kineto.json"}, []string{p}, filepath.Join(dir, "o.json"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return time.Since(t0), sum
	}
	merge(2000) // warm up
	small, _ := merge(10000)
	large, sum := merge(40000)
	if sum.Ranks[0].DuplicateIDs != 6*40000-6 {
		t.Errorf("duplicate handles counted %d, want %d", sum.Ranks[0].DuplicateIDs, 6*40000-6)
	}
	t.Logf("10k operations %v, 40k %v", small, large)
	if large > 10*small+time.Second {
		t.Fatalf("4× the operations took %.1f× the time: not linear", float64(large)/float64(small))
	}
}
