// Copyright The Shipwright Contributors (the function's name, signature and contract)
//
// SPDX-License-Identifier: Apache-2.0

// This file replaces test/utils/v1beta1/controllers.go of github.com/shipwright-io/build
// when hack/shipwright-it/build compiles Shipwright's integration suite (go test -c
// -overlay). It is the only file replaced: StartBuildControllers starts OUR controller,
// the command line in $SHIPWRIGHT_IT_CONTROLLER, as a subprocess against $KUBECONFIG,
// instead of Shipwright's manager in-process. Its output goes into the buffer the suite
// prints when a spec fails ("Logs of the operator").

package utils

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// lockedWriter lets the subprocess's output pipes write the one buffer in turn.
type lockedWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// StartBuildControllers starts the controller under test and returns the buffer its
// output goes to. The process is killed when the suite's process exits.
func StartBuildControllers() (*bytes.Buffer, error) {
	logBuffer := &bytes.Buffer{}
	command := strings.Fields(os.Getenv("SHIPWRIGHT_IT_CONTROLLER"))
	if len(command) == 0 {
		return nil, fmt.Errorf("SHIPWRIGHT_IT_CONTROLLER is not set: the controller's command line")
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = os.Environ()
	out := &lockedWriter{buf: logBuffer}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return logBuffer, nil
}
