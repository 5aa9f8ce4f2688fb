package telemetry

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Resource attribute keys that OpenTelemetry's semantic conventions do not define.
const (
	KeyVersion    = "ncclprof.version"
	KeyLocalRank  = "ncclprof.local_rank"
	KeyGlobalRank = "ncclprof.global_rank"
	KeyWorldSize  = "ncclprof.world_size"
	KeyGPU        = "ncclprof.gpu"      // int: the CUDA device index, like the ranks
	KeyGPUUUID    = "ncclprof.gpu.uuid" // string: when the device is named by a GPU-/MIG- UUID
	KeyCgroup     = "ncclprof.cgroup"
	KeySlurmJob   = "ncclprof.slurm_job_id"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
// set one.
const DefaultServiceName = "ncclprof"

// Host is what the resource describes; HostFromEnv fills it from the process.
type Host struct {
	Name      string
	PID       int
	Version   string
	Getenv    Getenv
	ReadFile  func(string) ([]byte, error)
	LocalRank int
}

// ProcessHost describes the current process.
func ProcessHost(version string) Host {
	h, _ := os.Hostname()
	return Host{Name: h, PID: os.Getpid(), Version: version, Getenv: os.Getenv,
		ReadFile: os.ReadFile, LocalRank: LocalRank(os.Getenv)}
}

// ResourceAttributes are what ncclprof detects (host, process, ranks, GPU, cgroup,
// container, Kubernetes, Slurm). OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME override
// them (see NewResource).
func ResourceAttributes(h Host) []attribute.KeyValue {
	getenv := h.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	kv := []attribute.KeyValue{
		semconv.ServiceName(DefaultServiceName),
		// Unique per process, so series of different ranks never merge downstream (Prometheus
		// makes it the instance label).
		semconv.ServiceInstanceID(fmt.Sprintf("%s/%d", h.Name, h.PID)),
		semconv.HostName(h.Name),
		semconv.ProcessPID(h.PID),
	}
	if h.Version != "" {
		kv = append(kv, attribute.String(KeyVersion, h.Version))
	}
	if h.LocalRank >= 0 {
		kv = append(kv, attribute.Int(KeyLocalRank, h.LocalRank))
	}
	for _, k := range []string{"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"} {
		if n, err := strconv.Atoi(strings.TrimSpace(getenv(k))); err == nil && n >= 0 {
			kv = append(kv, attribute.Int(KeyGlobalRank, n))
			break
		}
	}
	for _, k := range []string{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"} {
		if n, err := strconv.Atoi(strings.TrimSpace(getenv(k))); err == nil && n > 0 {
			kv = append(kv, attribute.Int(KeyWorldSize, n))
			break
		}
	}
	if g := GPU(getenv, h.LocalRank); g != "" {
		if n, err := strconv.Atoi(g); err == nil && n >= 0 {
			kv = append(kv, attribute.Int(KeyGPU, n))
		} else {
			kv = append(kv, attribute.String(KeyGPUUUID, g))
		}
	}
	if h.ReadFile != nil {
		if b, err := h.ReadFile("/proc/self/cgroup"); err == nil {
			if cg := Cgroup(string(b)); cg != "" {
				kv = append(kv, attribute.String(KeyCgroup, cg))
				if id := ContainerID(cg); id != "" {
					kv = append(kv, semconv.ContainerID(id))
				}
			}
		}
	}
	kv = append(kv, kubernetes(getenv, h)...)
	if j := strings.TrimSpace(getenv("SLURM_JOB_ID")); j != "" {
		kv = append(kv, attribute.String(KeySlurmJob, j))
	}
	return kv
}

// NewResource is the resource for ncclprof's metrics: the detected attributes, then the SDK's
// own (telemetry.sdk.*), then OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, later ones
// overriding earlier ones. A deprecated deployment.environment given there is also reported
// as its replacement, deployment.environment.name, unless that is given too.
func NewResource(h Host) (*resource.Resource, error) {
	res, err := resource.New(context.Background(),
		resource.WithAttributes(ResourceAttributes(h)...),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if res == nil {
		return res, err
	}
	set := res.Set()
	if env, ok := set.Value(deprecatedEnvironment); ok && !set.HasValue(semconv.DeploymentEnvironmentNameKey) {
		res, _ = resource.Merge(res, resource.NewWithAttributes(res.SchemaURL(),
			semconv.DeploymentEnvironmentName(env.Emit())))
	}
	return res, err
}

// deprecatedEnvironment is deployment.environment, renamed deployment.environment.name in the
// semantic conventions 1.27.
const deprecatedEnvironment = attribute.Key("deployment.environment")

// GPU is the device this process uses as CUDA_VISIBLE_DEVICES names it (an index or a
// GPU-/MIG- UUID): NCCLPROF_GPU if set; the only visible device; the visible device at the
// local rank when several are visible (the usual one-process-per-GPU layout); else the local
// rank itself (PyTorch's convention cuda:LOCAL_RANK). "" when nothing says.
func GPU(getenv Getenv, localRank int) string {
	if g := strings.TrimSpace(getenv("NCCLPROF_GPU")); g != "" {
		return g
	}
	if v, ok := lookup(getenv, "CUDA_VISIBLE_DEVICES"); ok {
		var devs []string
		for _, d := range strings.Split(v, ",") {
			if d = strings.TrimSpace(d); d != "" {
				devs = append(devs, d)
			}
		}
		switch {
		case len(devs) == 1:
			return devs[0]
		case len(devs) > 1 && localRank >= 0 && localRank < len(devs):
			return devs[localRank]
		case len(devs) > 1:
			return ""
		}
	}
	if localRank >= 0 {
		return strconv.Itoa(localRank)
	}
	return ""
}

func lookup(getenv Getenv, k string) (string, bool) {
	v := getenv(k)
	return v, strings.TrimSpace(v) != ""
}

// Cgroup is the process's cgroup path from /proc/self/cgroup: the unified (v2) hierarchy's
// path, or on cgroup v1 the cpu (else memory, else first) controller's.
func Cgroup(procSelfCgroup string) string {
	var v1 map[string]string
	firstV1 := ""
	for _, line := range strings.Split(procSelfCgroup, "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if v1 == nil {
			v1 = map[string]string{}
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			v1[ctl] = parts[2]
		}
		if firstV1 == "" {
			firstV1 = parts[2]
		}
	}
	for _, ctl := range []string{"cpu", "memory"} {
		if p, ok := v1[ctl]; ok {
			return p
		}
	}
	return firstV1
}

var containerIDRe = regexp.MustCompile(`([0-9a-f]{64})(?:\.scope)?$`)

// ContainerID is the 64-hex-digit container id at the end of a cgroup path (Docker, containerd,
// CRI-O, Podman name their cgroups after it), or "".
func ContainerID(cgroup string) string {
	last := cgroup[strings.LastIndexByte(cgroup, '/')+1:]
	if m := containerIDRe.FindStringSubmatch(last); m != nil {
		return m[1]
	}
	return ""
}

// kubernetes reads the pod's identity from the variables deployments usually set through the
// downward API (POD_NAME, POD_NAMESPACE, ...). Inside a pod (KUBERNETES_SERVICE_HOST set),
// the pod name defaults to the hostname and the namespace to the service account's.
func kubernetes(getenv Getenv, h Host) []attribute.KeyValue {
	var kv []attribute.KeyValue
	inPod := getenv("KUBERNETES_SERVICE_HOST") != ""
	pod := first(getenv, "POD_NAME", "K8S_POD_NAME", "KUBERNETES_POD_NAME", "MY_POD_NAME")
	if pod == "" && inPod {
		pod = first(getenv, "HOSTNAME")
		if pod == "" {
			pod = h.Name
		}
	}
	if pod != "" {
		kv = append(kv, semconv.K8SPodName(pod))
	}
	ns := first(getenv, "POD_NAMESPACE", "K8S_NAMESPACE", "K8S_POD_NAMESPACE", "KUBERNETES_NAMESPACE",
		"MY_POD_NAMESPACE")
	if ns == "" && inPod && h.ReadFile != nil {
		if b, err := h.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if ns != "" {
		kv = append(kv, semconv.K8SNamespaceName(ns))
	}
	if uid := first(getenv, "POD_UID", "K8S_POD_UID", "MY_POD_UID"); uid != "" {
		kv = append(kv, semconv.K8SPodUID(uid))
	}
	if node := first(getenv, "NODE_NAME", "K8S_NODE_NAME", "KUBERNETES_NODE_NAME", "MY_NODE_NAME"); node != "" {
		kv = append(kv, semconv.K8SNodeName(node))
	}
	return kv
}
