// Copyright The Shipwright Contributors (the function's name, signature and contract)
//
// SPDX-License-Identifier: Apache-2.0

// This file replaces test/utils/v1beta1/controllers.go of github.com/shipwright-io/build
// when hack/shipwright-it/build compiles Shipwright's integration suite (go test -c
// -overlay). It is the only file replaced: StartBuildControllers starts OUR controller
// as a subprocess against $KUBECONFIG (the suite's own clients use the same variable,
// environment.go) instead of Shipwright's manager in-process, and returns the buffer its
// output goes to, which the suite prints for a failed spec ("Logs of the operator").
//
// The command line is $SHIPWRIGHT_IT_CONTROLLER (split on blanks), else
// `buildrun-controller` (the console script) with the flags below. Like the original,
// it runs without leader election and without metrics. It is stopped when the suite
// ends: a DeferCleanup registered in the suite's BeforeSuite (it runs after AfterSuite)
// sends SIGTERM and waits for the controller's own shutdown, SIGKILL after
// stopGracePeriod; and the kernel sends SIGKILL if the suite's process dies first
// (Pdeathsig), so a killed suite leaves no controller behind.

package utils

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
)

// stopGracePeriod is how long the controller gets to stop on SIGTERM (it gives
// in-flight reconciles --shutdown-grace-period, set to 5 s below).
const stopGracePeriod = 15 * time.Second

// controllerCommand is the controller's command line.
func controllerCommand() []string {
	if command := strings.Fields(os.Getenv("SHIPWRIGHT_IT_CONTROLLER")); len(command) > 0 {
		return command
	}
	return []string{"buildrun-controller", "--metrics-bind-address", "0",
		"--health-probe-bind-address", "0", "--shutdown-grace-period", "5"}
}

// StartBuildControllers starts the controller under test and returns the buffer its
// output goes to.
func StartBuildControllers() (*bytes.Buffer, error) {
	logBuffer := &bytes.Buffer{}
	command := controllerCommand()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = os.Environ()
	// One writer for both: exec then calls Write from one goroutine at a time.
	cmd.Stdout = logBuffer
	cmd.Stderr = logBuffer
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the controller %q: %w", command, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	ginkgo.DeferCleanup(func() {
		select {
		case err := <-exited: // it ended before the suite did
			fmt.Fprintf(ginkgo.GinkgoWriter, "controller %q had already exited: %v\n", command, err)
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGracePeriod):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return logBuffer, nil
}
