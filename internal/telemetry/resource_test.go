package telemetry

import (
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

const cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestCgroup(t *testing.T) {
	for _, tc := range []struct{ in, want, container string }{
		{"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-" + cid + ".scope\n",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-" + cid + ".scope", cid},
		{"0::/system.slice/docker-" + cid + ".scope\n", "/system.slice/docker-" + cid + ".scope", cid},
		{"0::/user.slice/user-1000.slice/session-3.scope\n", "/user.slice/user-1000.slice/session-3.scope", ""},
		// cgroup v1: the cpu controller's path.
		{"12:memory:/docker/" + cid + "\n11:cpu,cpuacct:/docker/" + cid + "\n1:name=systemd:/init.scope\n", "/docker/" + cid, cid},
		{"5:memory:/slurm/uid_1000/job_42/step_0\n", "/slurm/uid_1000/job_42/step_0", ""},
		{"", "", ""},
	} {
		got := Cgroup(tc.in)
		if got != tc.want {
			t.Errorf("Cgroup(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if c := ContainerID(got); c != tc.container {
			t.Errorf("ContainerID(%q) = %q, want %q", got, c, tc.container)
		}
	}
}

func TestGPU(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		rank int
		want string
	}{
		{[]string{"NCCLPROF_GPU", "GPU-abc", "CUDA_VISIBLE_DEVICES", "3"}, 0, "GPU-abc"},
		{[]string{"CUDA_VISIBLE_DEVICES", "5"}, 2, "5"},
		{[]string{"CUDA_VISIBLE_DEVICES", "GPU-8a1b"}, -1, "GPU-8a1b"},
		{[]string{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}, 2, "6"},
		{[]string{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}, -1, ""},
		{[]string{"CUDA_VISIBLE_DEVICES", "4,5"}, 3, ""},
		{nil, 2, "2"},
		{nil, -1, ""},
	} {
		if got := GPU(envOf(tc.env...), tc.rank); got != tc.want {
			t.Errorf("GPU(%v, local rank %d) = %q, want %q", tc.env, tc.rank, got, tc.want)
		}
	}
}

func attrs(kv []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, a := range kv {
		m[string(a.Key)] = a.Value.Emit()
	}
	return m
}

func TestResourceAttributes(t *testing.T) {
	files := map[string]string{
		"/proc/self/cgroup": "0::/kubepods/pod-x/cri-containerd-" + cid + ".scope\n",
		"/var/run/secrets/kubernetes.io/serviceaccount/namespace": "research\n",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("absent")
	}
	h := Host{Name: "node7", PID: 99, Version: "0.1.0", ReadFile: read, LocalRank: 1,
		Getenv: envOf("KUBERNETES_SERVICE_HOST", "10.0.0.1", "HOSTNAME", "trainer-3", "NODE_NAME", "gpu-node-7",
			"RANK", "9", "WORLD_SIZE", "16", "CUDA_VISIBLE_DEVICES", "0,1", "SLURM_JOB_ID", "4242")}
	got := attrs(ResourceAttributes(h))
	want := map[string]string{"service.name": "ncclprof", "service.instance.id": "node7/99", "host.name": "node7", "process.pid": "99",
		KeyVersion: "0.1.0", KeyLocalRank: "1", KeyGlobalRank: "9", KeyWorldSize: "16", KeyGPU: "1",
		KeyCgroup: "/kubepods/pod-x/cri-containerd-" + cid + ".scope", "container.id": cid,
		"k8s.pod.name": "trainer-3", "k8s.namespace.name": "research", "k8s.node.name": "gpu-node-7",
		KeySlurmJob: "4242"}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
	// Outside Kubernetes, no pod attributes; the downward-API variables win inside.
	h.Getenv = envOf("POD_NAME", "p-1", "POD_NAMESPACE", "ns-1", "POD_UID", "uid-1")
	got = attrs(ResourceAttributes(h))
	if got["k8s.pod.name"] != "p-1" || got["k8s.namespace.name"] != "ns-1" || got["k8s.pod.uid"] != "uid-1" {
		t.Errorf("downward API: %v", got)
	}
	h.Getenv = envOf()
	got = attrs(ResourceAttributes(h))
	for k := range got {
		if strings.HasPrefix(k, "k8s.") {
			t.Errorf("%s set outside Kubernetes", k)
		}
	}
}

// The standard variables override what ncclprof detects.
func TestResourceFromEnv(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "llama-pretrain")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,host.name=override,team=infra")
	res, err := NewResource(Host{Name: "node7", PID: 5, LocalRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for it := res.Iter(); it.Next(); {
		got[string(it.Attribute().Key)] = it.Attribute().Value.Emit()
	}
	// The deprecated deployment.environment is also reported under its current name.
	for k, w := range map[string]string{"service.name": "llama-pretrain", "deployment.environment": "prod",
		"deployment.environment.name": "prod", "host.name": "override", "team": "infra", "process.pid": "5",
		"telemetry.sdk.language": "go"} {
		if got[k] != w {
			t.Errorf("%s = %q, want %q (resource %v)", k, got[k], w, got)
		}
	}
	// Given both, each keeps its own value.
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=old,deployment.environment.name=new")
	res, _ = NewResource(Host{Name: "node7", PID: 5, LocalRank: -1})
	if v, _ := res.Set().Value("deployment.environment.name"); v.AsString() != "new" {
		t.Errorf("deployment.environment.name = %q, want the one given", v.Emit())
	}
}

// TestGPUType: ncclprof.gpu is an int like the ranks beside it; a device named by UUID goes to
// ncclprof.gpu.uuid instead.
func TestGPUType(t *testing.T) {
	for _, tc := range []struct {
		cvd     string
		key     string
		typ     attribute.Type
		want    string
		without string
	}{
		{"4,5,6,7", KeyGPU, attribute.INT64, "5", KeyGPUUUID},
		{"GPU-8a1b,GPU-9c2d", KeyGPUUUID, attribute.STRING, "GPU-9c2d", KeyGPU},
	} {
		kvs := ResourceAttributes(Host{Name: "n", PID: 1, LocalRank: 1, Getenv: envOf("CUDA_VISIBLE_DEVICES", tc.cvd)})
		found := false
		for _, kv := range kvs {
			switch string(kv.Key) {
			case tc.key:
				found = true
				if kv.Value.Type() != tc.typ || kv.Value.Emit() != tc.want {
					t.Errorf("CUDA_VISIBLE_DEVICES=%s: %s = %v (%v), want %s (%v)", tc.cvd, tc.key, kv.Value.Emit(),
						kv.Value.Type(), tc.want, tc.typ)
				}
			case tc.without:
				t.Errorf("CUDA_VISIBLE_DEVICES=%s: %s is set too", tc.cvd, tc.without)
			case KeyLocalRank:
				if kv.Value.Type() != attribute.INT64 {
					t.Errorf("%s is a %v", KeyLocalRank, kv.Value.Type())
				}
			}
		}
		if !found {
			t.Errorf("CUDA_VISIBLE_DEVICES=%s: no %s", tc.cvd, tc.key)
		}
	}
}
