// Package healthtest checks the health rules shipped for GitOps tools (the Argo
// CD Lua health check in config/argocd, the Flux healthCheckExprs in
// config/flux and docs/operations.md) against GuardedJob status fixtures, and
// against kstatus, which Flux uses. It is a module of its own
// so that the Lua and CEL interpreters stay out of the manager's dependencies.
package healthtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	. "github.com/onsi/gomega"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

const (
	luaFile       = "../argocd/guardedjob-health.lua"
	requestLua    = "../argocd/guardedjob-request-health.lua"
	argoPatchFile = "../argocd/argocd-cm-patch.yaml"
	argoKey       = "resource.customizations.health.batch.guardedjob.dev_GuardedJob"
	fluxFile      = "../flux/kustomization-healthcheck.yaml"
	operationsDoc = "../../docs/operations.md"
)

// evalError marks a fixture on which Flux cannot evaluate the expressions yet
// (no status at all): Flux reports the object as not ready and polls again.
const evalError status.Status = "EvaluationError"

func TestHealth(t *testing.T) {
	script := read(t, luaFile)
	exprs := fluxExprs(t)
	tests := []struct {
		fixture  string
		argo     string
		argoMsg  string // a part of Argo CD's message
		flux     status.Status
		kstatus  status.Status
		whyDiffs string // why Flux's answer differs from kstatus's, if it does
	}{
		{fixture: "new-no-status", argo: "Progressing", argoMsg: "Waiting for the manager",
			flux: evalError, kstatus: status.CurrentStatus,
			whyDiffs: "kstatus reads an object without status as Current; the expressions wait for the manager's first write"},
		{fixture: "first-pass-intent-written", argo: "Progressing", argoMsg: "Waiting for the manager",
			flux: status.InProgressStatus, kstatus: status.CurrentStatus,
			whyDiffs: "kstatus cannot tell a missing observedGeneration from one not used; the expressions require it"},
		{fixture: "idle", argo: "Healthy", argoMsg: "the schedule, keys and lease timing are valid",
			flux: status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "running", argo: "Healthy", argoMsg: "is held by cluster-a/payments/daily-settlement-29123456-a1b2c3 (fence 34)",
			flux: status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "suspended", argo: "Suspended", argoMsg: "suspended: no new runs are scheduled",
			flux: status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "suspended-run-in-progress", argo: "Suspended",
			argoMsg: "suspended: no new runs are scheduled; a run goes on: lock payments:settlement is held by cluster-a/payments/daily-settlement-29123456-a1b2c3 (fence 34)",
			flux:    status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "suspended-with-note", argo: "Suspended",
			argoMsg: "suspended: no new runs are scheduled (by alice, until 2026-12-01T06:00:00Z): ledger migration",
			flux:    status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "suspended-after-failures", argo: "Suspended",
			argoMsg: "suspended: no new runs are scheduled (by guardedjob-manager): 3 runs in a row ended Failed",
			flux:    status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "suspend-expired", argo: "Healthy", argoMsg: "the schedule, keys and lease timing are valid",
			flux: status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "suspended-not-reconciled", argo: "Progressing", argoMsg: "generation 4 (observed: 3)",
			flux: status.InProgressStatus, kstatus: status.InProgressStatus},
		{fixture: "suspended-invalid-schedule", argo: "Degraded", argoMsg: `InvalidSchedule: spec.schedule "every day"`,
			flux: status.FailedStatus, kstatus: status.FailedStatus},
		{fixture: "store-unreachable", argo: "Healthy", argoMsg: "the lock store is unreachable: acquire lock payments:settlement",
			flux: status.CurrentStatus, kstatus: status.CurrentStatus},
		{fixture: "new-generation", argo: "Progressing", argoMsg: "generation 3 (observed: 2)",
			flux: status.InProgressStatus, kstatus: status.InProgressStatus},
		{fixture: "reconciling", argo: "Progressing", argoMsg: "generation 3",
			flux: status.InProgressStatus, kstatus: status.InProgressStatus},
		{fixture: "store-secret-not-found", argo: "Progressing", argoMsg: "StoreSecretNotFound: Secret payments/settlement-redis",
			flux: status.InProgressStatus, kstatus: status.InProgressStatus},
		{fixture: "invalid-schedule", argo: "Degraded", argoMsg: `InvalidSchedule: spec.schedule "every day"`,
			flux: status.FailedStatus, kstatus: status.FailedStatus},
		{fixture: "store-key-wrong-type", argo: "Degraded", argoMsg: "StoreKeyWrongType: payments:settlement holds a hash",
			flux: status.FailedStatus, kstatus: status.FailedStatus},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			g := NewWithT(t)
			raw := read(t, filepath.Join("testdata", tt.fixture+".yaml"))

			health, msg := argoHealth(t, script, raw)
			g.Expect(health).To(Equal(tt.argo), msg)
			g.Expect(msg).To(ContainSubstring(tt.argoMsg))

			u := toUnstructured(t, raw)
			flux, err := fluxStatus(exprs, u)
			if tt.flux == evalError {
				g.Expect(err).To(HaveOccurred())
			} else {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(flux).To(Equal(tt.flux))
			}

			res, err := status.Compute(u)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Status).To(Equal(tt.kstatus))
			if tt.whyDiffs == "" {
				g.Expect(flux).To(Equal(res.Status), "the expressions agree with kstatus")
			}
		})
	}
}

// The ConfigMap patch users apply carries exactly the tested scripts.
func TestArgoCDPatchCarriesTheScript(t *testing.T) {
	g := NewWithT(t)
	var patch struct {
		Data map[string]string `json:"data"`
	}
	g.Expect(yaml.Unmarshal([]byte(read(t, argoPatchFile)), &patch)).To(Succeed())
	g.Expect(patch.Data).To(HaveKeyWithValue(argoKey, read(t, luaFile)))
	for _, kind := range []string{"GuardedJobRun", "GuardedJobBackfill", "GuardedJobInspect", "GuardedJobUnlock"} {
		g.Expect(patch.Data).To(HaveKeyWithValue("resource.customizations.health.batch.guardedjob.dev_"+kind, read(t, requestLua)))
	}
}

// A request kept in Git is Progressing until its run or backfill has ended,
// Healthy when it did what was asked, and Degraded when someone should look.
func TestRequestHealth(t *testing.T) {
	script := read(t, requestLua)
	for _, tt := range []struct{ fixture, argo, argoMsg string }{
		{"request-run-no-status", "Progressing", "Waiting for the manager"},
		{"request-run-running", "Progressing", "Running: run daily-settlement-29412000-5f3a9c is running"},
		{"request-run-succeeded", "Healthy", "Finished (Succeeded): Job daily-settlement-29412000-5f3a9c completed"},
		{"request-run-busy", "Degraded", "Finished (Busy): lock payments:settlement is held by cluster-b/"},
		{"request-run-refused", "Degraded", `Refused: run-now guardedjobrun:5d1c refused: parameter "PATH" is not declared`},
		{"request-backfill-pending", "Progressing", "Pending: waits for backfill"},
		{"request-backfill-failed", "Degraded", "Finished: finished: 28 succeeded, 1 skipped (done already), 1 failed"},
		{"request-backfill-cancelled", "Healthy", "Cancelled: cancelled at 2026-12-05T03:10:00Z"},
		{"request-inspect-read", "Healthy", "Finished: read 1 set(s) of keys in redis://redis.example:6379"},
		{"request-inspect-store-down", "Degraded", "Finished: the store did not answer"},
		{"request-unlock-deleted", "Healthy", "Finished (Deleted): deleted lock payments:settlement held by batch-host-7"},
		{"request-unlock-changed", "Degraded", "Finished (Changed): lock payments:settlement is held by batch-host-8 now"},
		{"request-unlock-refused", "Degraded", "Refused (Refused): lock payments:settlement is held by cluster-b/"},
	} {
		t.Run(tt.fixture, func(t *testing.T) {
			g := NewWithT(t)
			health, msg := argoHealth(t, script, read(t, filepath.Join("testdata", tt.fixture+".yaml")))
			g.Expect(health).To(Equal(tt.argo), msg)
			g.Expect(msg).To(ContainSubstring(tt.argoMsg))
		})
	}
}

// docs/operations.md shows the same expressions as the tested Kustomization.
func TestFluxExpressionsDocumented(t *testing.T) {
	g := NewWithT(t)
	doc := read(t, operationsDoc)
	for name, e := range fluxExprs(t) {
		g.Expect(doc).To(ContainSubstring(name+": \""+e+"\""), "docs/operations.md shows the %s expression", name)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// argoHealth runs the script the way Argo CD does: the object decoded from
// JSON (numbers are floats) as the global obj, only the base, table, string and
// math libraries, and a table {status, message} returned.
func argoHealth(t *testing.T, script, rawYAML string) (healthStatus, message string) {
	t.Helper()
	g := NewWithT(t)
	js, err := yaml.YAMLToJSON([]byte(rawYAML))
	g.Expect(err).NotTo(HaveOccurred())
	var obj any
	g.Expect(json.Unmarshal(js, &obj)).To(Succeed())

	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		g.Expect(L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name))).To(Succeed())
	}
	L.SetGlobal("obj", toLua(L, obj))
	g.Expect(L.DoString(script)).To(Succeed())
	ret, ok := L.Get(-1).(*lua.LTable)
	g.Expect(ok).To(BeTrue(), "the script returns a table")
	st, ok := ret.RawGetString("status").(lua.LString)
	g.Expect(ok).To(BeTrue(), "status is a string")
	msg, ok := ret.RawGetString("message").(lua.LString)
	g.Expect(ok).To(BeTrue(), "message is a string")
	return string(st), string(msg)
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		tbl := L.NewTable()
		for _, e := range v {
			tbl.Append(toLua(L, e))
		}
		return tbl
	case map[string]any:
		tbl := L.NewTable()
		for k, e := range v {
			tbl.RawSetString(k, toLua(L, e))
		}
		return tbl
	}
	panic("unexpected JSON value")
}

func toUnstructured(t *testing.T, rawYAML string) *unstructured.Unstructured {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(rawYAML))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{}
	NewWithT(t).Expect(u.UnmarshalJSON(js)).To(Succeed())
	return u
}

// fluxExprs reads the GuardedJob entry of healthCheckExprs.
func fluxExprs(t *testing.T) map[string]string {
	t.Helper()
	g := NewWithT(t)
	var ks struct {
		Spec struct {
			HealthCheckExprs []map[string]string `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	g.Expect(yaml.Unmarshal([]byte(read(t, fluxFile)), &ks)).To(Succeed())
	for _, e := range ks.Spec.HealthCheckExprs {
		if e["apiVersion"] == "batch.guardedjob.dev/v1alpha1" && e["kind"] == "GuardedJob" {
			delete(e, "apiVersion")
			delete(e, "kind")
			g.Expect(e).To(HaveKey("current"))
			return e
		}
	}
	t.Fatal("no healthCheckExprs entry for GuardedJob in " + fluxFile)
	return nil
}

// fluxStatus evaluates the expressions as Flux's kustomize-controller does
// (RFC-0009): an observedGeneration that differs from metadata.generation is
// InProgress; then inProgress, failed and current in that order, the first
// true one wins; none true is InProgress. The expressions are parsed, not
// type-checked, and read the object's top-level fields as variables.
func fluxStatus(exprs map[string]string, u *unstructured.Unstructured) (status.Status, error) {
	obj := u.UnstructuredContent()
	if og, ok, _ := unstructured.NestedInt64(obj, "status", "observedGeneration"); ok && og != u.GetGeneration() {
		return status.InProgressStatus, nil
	}
	env, err := cel.NewEnv(cel.OptionalTypes(), cel.HomogeneousAggregateLiterals(), cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true), ext.Strings(), ext.Sets(), ext.Encoders())
	if err != nil {
		return "", err
	}
	for _, step := range []struct {
		name   string
		result status.Status
	}{{"inProgress", status.InProgressStatus}, {"failed", status.FailedStatus}, {"current", status.CurrentStatus}} {
		src := exprs[step.name]
		if src == "" {
			continue
		}
		ast, iss := env.Parse(src)
		if iss.Err() != nil {
			return "", iss.Err()
		}
		prg, err := env.Program(ast)
		if err != nil {
			return "", err
		}
		out, _, err := prg.Eval(obj)
		if err != nil {
			return "", err
		}
		b, ok := out.(types.Bool)
		if !ok {
			return "", &notBool{expr: strings.TrimSpace(src)}
		}
		if b {
			return step.result, nil
		}
	}
	return status.InProgressStatus, nil
}

type notBool struct{ expr string }

func (e *notBool) Error() string { return "expression is not a boolean: " + e.expr }
