// Command kstatus prints the status that sigs.k8s.io/cli-utils' kstatus computes for one resource.
//
// It reads the resource as JSON on stdin (the output of `kubectl get -o json`) and writes one JSON
// object: {"status": "Current|InProgress|Failed|Terminating|NotFound|Unknown", "message": "..."}.
// The tests use it to show that tools built on kstatus (Flux, kpt, Config Sync, cli-utils' apply
// waiter) read a WorkflowRun's state as its conditions mean it. Built by towline_dev.kstatus with the
// cli-utils version pinned in towline_dev/versions.py.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	// UnmarshalJSON keeps integers as int64, which kstatus' generation check needs.
	resource := &unstructured.Unstructured{}
	if err := resource.UnmarshalJSON(data); err != nil {
		fail("stdin is not one Kubernetes object as JSON: %v", err)
	}
	result, err := status.Compute(resource)
	if err != nil {
		fail("kstatus could not compute a status: %v", err)
	}
	out, err := json.Marshal(verdict{Status: result.Status.String(), Message: result.Message})
	if err != nil {
		fail("encoding the result: %v", err)
	}
	fmt.Println(string(out))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(1)
}
