// Command oracle answers, for a Shipwright strategy, Build and BuildRun, what
// Shipwright v0.20.13 itself would put into the TaskRun (its own
// resources.GenerateTaskRun), or with "executor": "PipelineRun" into the
// PipelineRun (its own resources.GeneratePipelineRun), and what Tekton's own
// SetDefaults + Validate say about that object and about one made by this
// repo's controller.
//
// Batch protocol, one JSON object per line on stdin, one answer per line on
// stdout, in order:
//
//	in:  {"id", "strategyKind": "BuildStrategy"|"ClusterBuildStrategy",
//	      "strategy", "build", "buildRun", "serviceAccountName",
//	      "env": {NAME: value}   (Shipwright's controller settings, e.g. GIT_CONTAINER_IMAGE),
//	      "executor": "TaskRun" (or absent) | "PipelineRun",
//	      "ours": TaskRun/PipelineRun or null,
//	      "results": [TaskRunResult] or absent}
//	out: {"id", "shipwright": TaskRun/PipelineRun|null, "shipwrightError": "",
//	      "shipwrightDefaulted": TaskRun/PipelineRun|null, "shipwrightInvalid": "",
//	      "oursDecoded": same|null, "oursDefaulted": same|null,
//	      "oursInvalid": "", "error": "",
//	      "statusFromResults": {"output", "source"} | null, "resultsPanic": ""}
//
// With "results", the BuildRun's status is also filled from them by Shipwright's
// own UpdateBuildRunUsingTaskResults (status.buildSpec set to the Build's spec, as
// Shipwright's reconciler has it by then); a panic there is reported, not fatal.
//
// With "statusOf" the request asks only how Shipwright's BuildRun reconciler would set
// the BuildRun's status from a TaskRun or PipelineRun (the executor) as Tekton left it:
// buildrun.go's steps, with Shipwright's own functions and runners. At start: the Build
// as GetBuildObject reads it (the request's "build" for a BuildRun naming it, a
// transient one of an embedded spec), status.buildSpec set to its spec, then the
// factory's CreateImageBuildRunner (its generator, from "strategy"), which may change
// the Build's spec that status.buildSpec points at before Shipwright's next status
// write stores it. Then, on Shipwright's runner of the run as Tekton left it
// (TektonTaskRunWrapper or TektonPipelineRunWrapper): GetResults into
// UpdateBuildRunUsingTaskResults, the Succeeded condition into
// UpdateImageBuildRunFromExecutor (for a TaskRun that includes
// UpdateBuildRunUsingTaskFailures), and startTime and completionTime from GetStartTime
// and GetCompletionTime, as that condition's branch of buildrun.go copies them. Its
// client is controller-runtime's fake client holding "objects" (the executor's pod, a
// PipelineRun's TaskRuns and their pods) and the Build: what is missing there is
// NotFound, as a deleted object is.
//
//	in:  {"id", "executor", "strategyKind", "strategy", "build", "buildRun",
//	      "statusOf": {"executor": TaskRun/PipelineRun, "objects": [Pod|TaskRun]}}
//	out: {"id", "status": {"condition", "failureDetails", "output", "source",
//	                       "startTime", "completionTime", "buildSpec"} | null,
//	      "statusError": "" (the error Shipwright's reconcile would return, to retry),
//	      "statusPanic": "", "error": ""}
//
// "ours" is decoded strictly: a field Tekton's Go types do not have is an
// error in oursInvalid, never silently dropped. oursDecoded is ours as Go
// reads and writes it back, so it compares with "shipwright" field for field
// (Go's encoding writes empty structs such as `computeResources: {}`).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	buildapi "github.com/shipwright-io/build/pkg/apis/build/v1beta1"
	"github.com/shipwright-io/build/pkg/config"
	shipwrightbuildrun "github.com/shipwright-io/build/pkg/reconciler/buildrun"
	"github.com/shipwright-io/build/pkg/reconciler/buildrun/resources"
	pipelineapi "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type request struct {
	ID                 string                      `json:"id"`
	StrategyKind       string                      `json:"strategyKind"`
	Strategy           json.RawMessage             `json:"strategy"`
	Build              json.RawMessage             `json:"build"`
	BuildRun           json.RawMessage             `json:"buildRun"`
	ServiceAccountName string                      `json:"serviceAccountName"`
	Env                map[string]string           `json:"env"`
	Executor           string                      `json:"executor"`
	Ours               json.RawMessage             `json:"ours"`
	Results            []pipelineapi.TaskRunResult `json:"results"`
	StatusOf           *statusRequest              `json:"statusOf"`
}

type statusRequest struct {
	Executor json.RawMessage   `json:"executor"`
	Objects  []json.RawMessage `json:"objects"`
}

// statusAnswer is what Shipwright's reconcile leaves in the BuildRun's status.
type statusAnswer struct {
	Condition      *buildapi.Condition      `json:"condition"`
	FailureDetails *buildapi.FailureDetails `json:"failureDetails"`
	Output         *buildapi.Output         `json:"output"`
	Source         *buildapi.SourceResult   `json:"source"`
	StartTime      *metav1.Time             `json:"startTime"`
	CompletionTime *metav1.Time             `json:"completionTime"`
	BuildSpec      *buildapi.BuildSpec      `json:"buildSpec"`
}

type statusFromResults struct {
	Output *buildapi.Output       `json:"output"`
	Source *buildapi.SourceResult `json:"source"`
}

// The executor fields hold a *pipelineapi.TaskRun or a *pipelineapi.PipelineRun
// (as the request's executor says), or nothing (null).
type response struct {
	ID                  string             `json:"id"`
	Shipwright          any                `json:"shipwright"`
	ShipwrightError     string             `json:"shipwrightError"`
	ShipwrightDefaulted any                `json:"shipwrightDefaulted"`
	ShipwrightInvalid   string             `json:"shipwrightInvalid"`
	OursDecoded         any                `json:"oursDecoded"`
	OursDefaulted       any                `json:"oursDefaulted"`
	OursInvalid         string             `json:"oursInvalid"`
	Error               string             `json:"error"`
	StatusFromResults   *statusFromResults `json:"statusFromResults"`
	ResultsPanic        string             `json:"resultsPanic"`
	Status              *statusAnswer      `json:"status,omitempty"`
	StatusError         string             `json:"statusError,omitempty"`
	StatusPanic         string             `json:"statusPanic,omitempty"`
}

// executor is what both kinds of Tekton run share here: defaulting, validation,
// a deep copy and a name.
type executor interface {
	metav1.Object
	SetDefaults(ctx context.Context)
	Validate(ctx context.Context) *apis.FieldError
}

// pipelineRunExecutor is the request's executor kind.
func pipelineRunExecutor(req *request) (bool, error) {
	switch req.Executor {
	case "", "TaskRun":
		return false, nil
	case "PipelineRun":
		return true, nil
	}
	return false, fmt.Errorf("unknown executor %q", req.Executor)
}

// newExecutor is an empty TaskRun or PipelineRun to decode into.
func newExecutor(pipelineRun bool) executor {
	if pipelineRun {
		return &pipelineapi.PipelineRun{}
	}
	return &pipelineapi.TaskRun{}
}

// deepCopy copies a TaskRun or PipelineRun.
func deepCopy(obj executor) executor {
	switch o := obj.(type) {
	case *pipelineapi.PipelineRun:
		return o.DeepCopy()
	case *pipelineapi.TaskRun:
		return o.DeepCopy()
	}
	panic(fmt.Sprintf("not an executor: %T", obj))
}

// fromResults is Shipwright's status update from a finished TaskRun's results.
func fromResults(build *buildapi.Build, buildRun *buildapi.BuildRun,
	results []pipelineapi.TaskRunResult) (out *statusFromResults, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			out, panicked = nil, fmt.Sprint(r)
		}
	}()
	run := buildRun.DeepCopy()
	run.Status.BuildSpec = build.Spec.DeepCopy()
	resources.UpdateBuildRunUsingTaskResults(context.Background(), run, results, reconcile.Request{})
	return &statusFromResults{Output: run.Status.Output, Source: run.Status.Source}, ""
}

// statusClient is controller-runtime's fake client holding `objects` (Pods and TaskRuns,
// told apart by their kind) and `build` (when it has a name), and its scheme.
func statusClient(objects []json.RawMessage, build *buildapi.Build) (client.Client, *runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, pipelineapi.AddToScheme, buildapi.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, nil, err
		}
	}
	var objs []client.Object
	if build.Name != "" {
		objs = append(objs, build)
	}
	for _, raw := range objects {
		var kind metav1.TypeMeta
		if err := json.Unmarshal(raw, &kind); err != nil {
			return nil, nil, err
		}
		var obj client.Object
		switch kind.Kind {
		case "Pod":
			obj = &corev1.Pod{}
		case "TaskRun":
			obj = &pipelineapi.TaskRun{}
		default:
			return nil, nil, fmt.Errorf("object of kind %q: only Pod and TaskRun", kind.Kind)
		}
		if err := json.Unmarshal(raw, obj); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", kind.Kind, err)
		}
		objs = append(objs, obj)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), scheme, nil
}

// fromExecutor is Shipwright's BuildRun reconciler (buildrun.go) setting the status of
// a BuildRun not yet completed from its executor: results first, then the condition.
func fromExecutor(c client.Client, buildRun *buildapi.BuildRun,
	runner shipwrightbuildrun.ImageBuildRunner) (out *statusAnswer, failed, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			out, failed, panicked = nil, "", fmt.Sprint(r)
		}
	}()
	ctx := context.Background()
	if results := runner.GetResults(ctx, c); len(results) > 0 {
		resources.UpdateBuildRunUsingTaskResults(ctx, buildRun, results, reconcile.Request{})
	}
	status := &buildRun.Status
	if condition := runner.GetCondition(apis.ConditionSucceeded); condition != nil {
		if err := resources.UpdateImageBuildRunFromExecutor(ctx, c, buildRun, runner.GetObject(), condition); err != nil {
			return nil, err.Error(), ""
		}
		// buildrun.go's own assignments in this branch, whatever the condition's status
		// (its metrics and pod reads around them left out):
		executorStartTime := runner.GetStartTime()
		if status.StartTime == nil && executorStartTime != nil {
			status.StartTime = executorStartTime
		}
		if runner.GetCompletionTime() != nil && status.CompletionTime == nil {
			status.CompletionTime = runner.GetCompletionTime()
		}
	}
	//nolint:staticcheck // FailureDetails is what Shipwright v0.20 still writes
	return &statusAnswer{Condition: status.GetCondition(buildapi.Succeeded),
		FailureDetails: status.FailureDetails, Output: status.Output, Source: status.Source,
		StartTime: status.StartTime, CompletionTime: status.CompletionTime,
		BuildSpec: status.BuildSpec}, "", ""
}

// started is what Shipwright's reconcile of the new BuildRun leaves in its status before
// the run exists (buildrun.go): the Build GetBuildObject reads, `buildRun.Status.BuildSpec
// = &build.Spec` (buildrun.go's assignment, replicated), then the factory's
// CreateImageBuildRunner (whose generator may change that spec; its runner is dropped:
// the run as Tekton left it is the request's).
func started(c client.Client, scheme *runtime.Scheme, cfg *config.Config, buildRun *buildapi.BuildRun,
	strategy buildapi.BuilderStrategy, pipelineRun bool) error {
	ctx := context.Background()
	build := &buildapi.Build{}
	if err := resources.GetBuildObject(ctx, c, buildRun, build); err != nil {
		return fmt.Errorf("GetBuildObject: %w", err)
	}
	buildRun.Status.BuildSpec = &build.Spec
	var factory shipwrightbuildrun.ImageBuildRunnerFactory = &shipwrightbuildrun.TektonTaskRunImageBuildRunnerFactory{}
	if pipelineRun {
		factory = &shipwrightbuildrun.TektonPipelineRunImageBuildRunnerFactory{}
	}
	serviceAccount := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := factory.CreateImageBuildRunner(ctx, c, cfg, serviceAccount, strategy, build, buildRun,
		scheme, controllerutil.SetControllerReference); err != nil {
		return fmt.Errorf("CreateImageBuildRunner: %w", err)
	}
	return nil
}

func answerStatus(req *request, resp *response, pipelineRun bool) {
	strategy, build, buildRun, err := decodeInputs(req)
	if err != nil {
		resp.Error = err.Error()
		return
	}
	c, scheme, err := statusClient(req.StatusOf.Objects, build)
	if err != nil {
		resp.Error = "objects: " + err.Error()
		return
	}
	cfg, err := shipwrightConfig(req.Env)
	if err != nil {
		resp.Error = "config: " + err.Error()
		return
	}
	if err := started(c, scheme, cfg, buildRun, strategy, pipelineRun); err != nil {
		resp.Error = err.Error()
		return
	}
	var runner shipwrightbuildrun.ImageBuildRunner
	if pipelineRun {
		run := &pipelineapi.PipelineRun{}
		if err := json.Unmarshal(req.StatusOf.Executor, run); err != nil {
			resp.Error = "executor: " + err.Error()
			return
		}
		runner = &shipwrightbuildrun.TektonPipelineRunWrapper{PipelineRun: run}
	} else {
		run := &pipelineapi.TaskRun{}
		if err := json.Unmarshal(req.StatusOf.Executor, run); err != nil {
			resp.Error = "executor: " + err.Error()
			return
		}
		runner = &shipwrightbuildrun.TektonTaskRunWrapper{TaskRun: run}
	}
	resp.Status, resp.StatusError, resp.StatusPanic = fromExecutor(c, buildRun, runner)
}

// decodeInputs decodes the request's strategy (of its strategyKind), Build and BuildRun.
func decodeInputs(req *request) (buildapi.BuilderStrategy, *buildapi.Build, *buildapi.BuildRun, error) {
	var strategy buildapi.BuilderStrategy = &buildapi.BuildStrategy{}
	if req.StrategyKind == "ClusterBuildStrategy" {
		strategy = &buildapi.ClusterBuildStrategy{}
	}
	if err := strict(req.Strategy, strategy); err != nil {
		return nil, nil, nil, fmt.Errorf("strategy: %w", err)
	}
	build := &buildapi.Build{}
	if err := strict(req.Build, build); err != nil {
		return nil, nil, nil, fmt.Errorf("build: %w", err)
	}
	buildRun := &buildapi.BuildRun{}
	if err := strict(req.BuildRun, buildRun); err != nil {
		return nil, nil, nil, fmt.Errorf("buildRun: %w", err)
	}
	return strategy, build, buildRun, nil
}

func strict(raw []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// tekton runs Tekton's defaulting and validation, as its admission webhook does
// on create, on a copy of obj (a TaskRun or PipelineRun).
func tekton(obj executor) (executor, string) {
	ctx := context.Background()
	out := deepCopy(obj)
	out.SetDefaults(ctx)
	if err := out.Validate(ctx); err != nil {
		return out, err.Error()
	}
	return out, ""
}

// shipwrightConfig is Shipwright's controller configuration as its process
// would read it from exactly these environment variables.
func shipwrightConfig(env map[string]string) (*config.Config, error) {
	for name, value := range env {
		if err := os.Setenv(name, value); err != nil {
			return nil, err
		}
	}
	defer func() {
		for name := range env {
			_ = os.Unsetenv(name)
		}
	}()
	cfg := config.NewDefaultConfig()
	if err := cfg.SetConfigFromEnv(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func answer(req *request) response {
	resp := response{ID: req.ID}
	pipelineRun, err := pipelineRunExecutor(req)
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	if req.StatusOf != nil {
		answerStatus(req, &resp, pipelineRun)
		return resp
	}
	if len(req.Ours) > 0 && string(req.Ours) != "null" {
		ours := newExecutor(pipelineRun)
		if err := strict(req.Ours, ours); err != nil {
			resp.OursInvalid = "decoding: " + err.Error()
		} else {
			resp.OursDecoded = ours
			resp.OursDefaulted, resp.OursInvalid = tekton(ours)
		}
	}
	strategy, build, buildRun, err := decodeInputs(req)
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	if req.Results != nil {
		resp.StatusFromResults, resp.ResultsPanic = fromResults(build, buildRun, req.Results)
	}
	cfg, err := shipwrightConfig(req.Env)
	if err != nil {
		resp.Error = "config: " + err.Error()
		return resp
	}
	var generated executor
	if pipelineRun {
		generated, err = resources.GeneratePipelineRun(cfg, build, buildRun, req.ServiceAccountName, strategy)
	} else {
		generated, err = resources.GenerateTaskRun(cfg, build, buildRun, req.ServiceAccountName, strategy)
	}
	if err != nil {
		resp.ShipwrightError = err.Error()
		return resp
	}
	resp.Shipwright = generated
	// The API server names a generateName object before Tekton's webhook sees it.
	named := deepCopy(generated)
	if named.GetName() == "" && named.GetGenerateName() != "" {
		named.SetName(named.GetGenerateName() + "oracle")
	}
	resp.ShipwrightDefaulted, resp.ShipwrightInvalid = tekton(named)
	return resp
}

func main() {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	dec := json.NewDecoder(in)
	enc := json.NewEncoder(out)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			if err.Error() == "EOF" {
				break
			}
			fmt.Fprintln(os.Stderr, "oracle: reading a request:", err)
			os.Exit(2)
		}
		if err := enc.Encode(answer(&req)); err != nil {
			fmt.Fprintln(os.Stderr, "oracle: writing an answer:", err)
			os.Exit(2)
		}
		if err := out.Flush(); err != nil {
			os.Exit(2)
		}
	}
}
