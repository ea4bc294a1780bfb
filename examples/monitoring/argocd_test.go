package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

const (
	healthDir   = "argocd/examples.watchgrade.dev/WatchTarget"
	argocdCMKey = "resource.customizations.health.examples.watchgrade.dev_WatchTarget"
)

// healthStatus is Argo CD's health of a resource.
type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// healthTests is the layout of Argo CD's health_test.yaml.
type healthTests struct {
	Tests []struct {
		HealthStatus healthStatus `json:"healthStatus"`
		InputPath    string       `json:"inputPath"`
	} `json:"tests"`
}

// The health statuses a check may return; Argo CD turns anything else
// into Unknown.
var validHealth = map[string]bool{"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true}

// runHealthLua runs a health check the way Argo CD runs a customised one
// (util/lua in argo-cd): a gopher-lua state with no standard library but
// package, base and table (Argo CD adds a reduced os, which this script
// does not use), a one-second deadline, the object as the global obj
// (JSON numbers as Lua numbers), and the table the script returns read as
// {status, message}.
func runHealthLua(t *testing.T, script string, obj map[string]any) healthStatus {
	t.Helper()
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		t.Fatalf("health.lua: %v", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua returned %s, want a table", l.Get(-1).Type())
	}
	hs := healthStatus{Status: lua.LVAsString(ret.RawGetString("status")), Message: lua.LVAsString(ret.RawGetString("message"))}
	if !validHealth[hs.Status] {
		t.Fatalf("health.lua returned status %q, which Argo CD reads as Unknown", hs.Status)
	}
	return hs
}

func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetString(k, toLua(l, item))
		}
		return t
	}
	return lua.LNil
}

// readObject reads a fixture as Argo CD holds it: JSON-decoded, numbers
// as float64.
func readObject(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(j, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return obj
}

func readHealthTests(t *testing.T) healthTests {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(healthDir, "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ht healthTests
	if err := yaml.UnmarshalStrict(b, &ht); err != nil {
		t.Fatal(err)
	}
	if len(ht.Tests) == 0 {
		t.Fatal("health_test.yaml has no tests")
	}
	return ht
}

func TestArgoCDHealthCheck(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(healthDir, "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	cases := readHealthTests(t).Tests
	fmt.Printf("monitoring: argocd health.lua cases=%d\n", len(cases))
	for _, tc := range cases {
		t.Run(tc.InputPath, func(t *testing.T) {
			got := runHealthLua(t, string(script), readObject(t, filepath.Join(healthDir, tc.InputPath)))
			if diff := cmp.Diff(tc.HealthStatus, got); diff != "" {
				t.Errorf("health.lua(%s) (-want +got):\n%s", tc.InputPath, diff)
			}
		})
	}
}

// kstatusHealth is the Argo CD health that says what a kstatus status
// says.
var kstatusHealth = map[status.Status]string{
	status.CurrentStatus:     "Healthy",
	status.InProgressStatus:  "Progressing",
	status.FailedStatus:      "Degraded",
	status.TerminatingStatus: "Progressing",
}

// TestArgoCDHealthAgreesWithKstatus: for every fixture, kstatus's
// status.Compute and the Lua check say the same; the one state kstatus
// lacks, suspension, is the only exception.
func TestArgoCDHealthAgreesWithKstatus(t *testing.T) {
	for _, tc := range readHealthTests(t).Tests {
		obj := readObject(t, filepath.Join(healthDir, tc.InputPath))
		// kstatus wants the API machinery's decoding: integers as int64.
		j, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("%s: %v", tc.InputPath, err)
		}
		res, err := status.Compute(&u)
		if err != nil {
			t.Fatalf("%s: %v", tc.InputPath, err)
		}
		want := kstatusHealth[res.Status]
		if suspend, _, _ := unstructured.NestedBool(obj, "spec", "suspend"); suspend {
			want = "Suspended"
		}
		if tc.HealthStatus.Status != want {
			t.Errorf("%s: kstatus says %s (%s), so Argo CD should say %s; health_test.yaml says %s",
				tc.InputPath, res.Status, res.Message, want, tc.HealthStatus.Status)
		}
	}
}

// TestArgoCDFixturesCoverTheStates: the real fixtures show each state the
// issue names, and the derived ones differ from a real one only by what
// they claim.
func TestArgoCDFixturesCoverTheStates(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range readHealthTests(t).Tests {
		if strings.Contains(tc.InputPath, "testdata/e2e/") {
			seen[tc.HealthStatus.Status] = true
		}
	}
	for _, s := range []string{"Healthy", "Progressing", "Degraded"} {
		if !seen[s] {
			t.Errorf("no object from the e2e run is %s", s)
		}
	}
	for _, d := range derivedFixtures {
		want := readObject(t, "testdata/e2e/clientgo/ready.yaml")
		if err := d.change(want); err != nil {
			t.Fatalf("%s: %v", d.file, err)
		}
		path := filepath.Join(healthDir, "testdata", d.file)
		if *update {
			writeDerivedFixture(t, path, d.comment, want)
		}
		got := readObject(t, path)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s is not ready.yaml with its one change (-want +got):\n%s\n(make monitoring-capture rewrites it)", d.file, diff)
		}
	}
}

// derivedFixtures are the Argo CD fixtures for states a WatchTarget never
// reaches, each the captured ready.yaml with one change. `-update` (make
// monitoring-capture) rewrites them from a new capture.
var derivedFixtures = []struct {
	file, comment string
	change        func(map[string]any) error
}{
	{
		file:    "suspended.yaml",
		comment: "testdata/e2e/clientgo/ready.yaml with spec.suspend: true, for kinds that have it.",
		change: func(o map[string]any) error {
			spec, ok := o["spec"].(map[string]any)
			if !ok {
				return fmt.Errorf("ready.yaml has no spec")
			}
			spec["suspend"] = true
			return nil
		},
	},
	{
		file:    "deleting.yaml",
		comment: "testdata/e2e/clientgo/ready.yaml with a deletionTimestamp, as while a finalizer holds it.",
		change: func(o map[string]any) error {
			meta, ok := o["metadata"].(map[string]any)
			if !ok {
				return fmt.Errorf("ready.yaml has no metadata")
			}
			created, err := time.Parse(time.RFC3339, fmt.Sprint(meta["creationTimestamp"]))
			if err != nil {
				return fmt.Errorf("ready.yaml's creationTimestamp: %w", err)
			}
			meta["deletionTimestamp"] = created.Add(time.Hour).UTC().Format(time.RFC3339)
			return nil
		},
	},
}

func writeDerivedFixture(t *testing.T, path, comment string, obj map[string]any) {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte("# "+comment+"\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestArgoCDConfigMapCarriesTheScript: the argocd-cm snippet installs
// health.lua as it is.
func TestArgoCDConfigMapCarriesTheScript(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(healthDir, "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("argocd/argocd-cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   map[string]any    `json:"metadata"`
		Data       map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata["name"] != "argocd-cm" {
		t.Errorf("argocd-cm.yaml is a %s named %v, want the ConfigMap argocd-cm", cm.Kind, cm.Metadata["name"])
	}
	if diff := cmp.Diff(string(script), cm.Data[argocdCMKey]); diff != "" {
		t.Errorf("data[%s] differs from health.lua (-health.lua +argocd-cm.yaml):\n%s", argocdCMKey, diff)
	}
}
