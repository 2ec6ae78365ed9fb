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
	"github.com/shipwright-io/build/pkg/reconciler/buildrun/resources"
	pipelineapi "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
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
	if len(req.Ours) > 0 && string(req.Ours) != "null" {
		ours := newExecutor(pipelineRun)
		if err := strict(req.Ours, ours); err != nil {
			resp.OursInvalid = "decoding: " + err.Error()
		} else {
			resp.OursDecoded = ours
			resp.OursDefaulted, resp.OursInvalid = tekton(ours)
		}
	}
	var strategy buildapi.BuilderStrategy
	switch req.StrategyKind {
	case "ClusterBuildStrategy":
		s := &buildapi.ClusterBuildStrategy{}
		if err := strict(req.Strategy, s); err != nil {
			resp.Error = "strategy: " + err.Error()
			return resp
		}
		strategy = s
	default:
		s := &buildapi.BuildStrategy{}
		if err := strict(req.Strategy, s); err != nil {
			resp.Error = "strategy: " + err.Error()
			return resp
		}
		strategy = s
	}
	build := &buildapi.Build{}
	if err := strict(req.Build, build); err != nil {
		resp.Error = "build: " + err.Error()
		return resp
	}
	buildRun := &buildapi.BuildRun{}
	if err := strict(req.BuildRun, buildRun); err != nil {
		resp.Error = "buildRun: " + err.Error()
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
