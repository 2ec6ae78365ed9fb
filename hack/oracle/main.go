// Command oracle answers, for a Shipwright strategy, Build and BuildRun, what
// Shipwright v0.20.13 itself would put into the TaskRun (its own
// resources.GenerateTaskRun) and what Tekton's own SetDefaults + Validate say
// about that TaskRun and about one made by this repo's controller.
//
// Batch protocol, one JSON object per line on stdin, one answer per line on
// stdout, in order:
//
//	in:  {"id", "strategyKind": "BuildStrategy"|"ClusterBuildStrategy",
//	      "strategy", "build", "buildRun", "serviceAccountName",
//	      "env": {NAME: value}   (Shipwright's controller settings, e.g. GIT_CONTAINER_IMAGE),
//	      "ours": TaskRun or null}
//	out: {"id", "shipwright": TaskRun|null, "shipwrightError": "",
//	      "shipwrightDefaulted": TaskRun|null, "shipwrightInvalid": "",
//	      "oursDecoded": TaskRun|null, "oursDefaulted": TaskRun|null,
//	      "oursInvalid": "", "error": ""}
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
)

type request struct {
	ID                 string            `json:"id"`
	StrategyKind       string            `json:"strategyKind"`
	Strategy           json.RawMessage   `json:"strategy"`
	Build              json.RawMessage   `json:"build"`
	BuildRun           json.RawMessage   `json:"buildRun"`
	ServiceAccountName string            `json:"serviceAccountName"`
	Env                map[string]string `json:"env"`
	Ours               json.RawMessage   `json:"ours"`
}

type response struct {
	ID                  string               `json:"id"`
	Shipwright          *pipelineapi.TaskRun `json:"shipwright"`
	ShipwrightError     string               `json:"shipwrightError"`
	ShipwrightDefaulted *pipelineapi.TaskRun `json:"shipwrightDefaulted"`
	ShipwrightInvalid   string               `json:"shipwrightInvalid"`
	OursDecoded         *pipelineapi.TaskRun `json:"oursDecoded"`
	OursDefaulted       *pipelineapi.TaskRun `json:"oursDefaulted"`
	OursInvalid         string               `json:"oursInvalid"`
	Error               string               `json:"error"`
}

func strict(raw []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// tekton runs Tekton's defaulting and validation, as its admission webhook does
// on create, on a copy of tr.
func tekton(tr *pipelineapi.TaskRun) (*pipelineapi.TaskRun, string) {
	ctx := context.Background()
	out := tr.DeepCopy()
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
	if len(req.Ours) > 0 && string(req.Ours) != "null" {
		ours := &pipelineapi.TaskRun{}
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
	cfg, err := shipwrightConfig(req.Env)
	if err != nil {
		resp.Error = "config: " + err.Error()
		return resp
	}
	tr, err := resources.GenerateTaskRun(cfg, build, buildRun, req.ServiceAccountName, strategy)
	if err != nil {
		resp.ShipwrightError = err.Error()
		return resp
	}
	resp.Shipwright = tr
	// The API server names a generateName object before Tekton's webhook sees it.
	named := tr.DeepCopy()
	if named.Name == "" && named.GenerateName != "" {
		named.Name = named.GenerateName + "oracle"
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
