// Command tcp-probe is a Towline step type written against the step protocol v1
// directly, with Go's standard library only (docs/step-protocol.md).
//
// It reads its inputs from TOWLINE_INPUTS_PATH, looks at the credential slot
// "api" (reporting whether its key "token" is there, its length and a short
// SHA-256 prefix, never the value), echoes TOWLINE_IDEMPOTENCY_KEY, optionally
// makes one raw TCP connect ("connect": "host:port") and reports whether it got
// through, and writes one result document to TOWLINE_RESULT_PATH. The input
// "fail" makes it fail on purpose, or write a result that breaks the protocol,
// so the operator's handling of each case can be tested on a real node.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The protocol's exit codes.
const (
	exitOK         = 0
	exitPermanent  = 1
	exitValidation = 2
	exitRetryable  = 75
)

const (
	protocolVersion   = 1
	resultLimitBytes  = 4096 // the kubelet keeps no more of a termination message
	inputsLimitBytes  = 1 << 20
	maxMessageChars   = 1024
	dialTimeout       = 3 * time.Second
	credentialSlot    = "api"
	credentialKey     = "token"
	hashPrefixChars   = 8
	defaultInputsPath = "/var/run/towline/step/inputs.json"
	defaultCredsDir   = "/var/run/towline/credentials"
	defaultResultPath = "/dev/termination-log"
)

// failModes are the values of the input "fail": each makes the step fail, or
// break the protocol, in one particular way.
var failModes = map[string]bool{
	"transient":        true, // errorClass transient, retryable, exit 75
	"permanent":        true, // errorClass permanent, exit 1
	"invalid-result":   true, // a document whose "ok" is not a boolean, exit 0
	"oversized-result": true, // a well-formed document over the 4096-byte limit, exit 0
	"no-result":        true, // no document at all, exit 75
}

type inputs struct {
	message string
	connect string
	fail    string
}

type result struct {
	Version    int    `json:"version"`
	OK         bool   `json:"ok"`
	Output     any    `json:"output,omitempty"`
	ErrorClass string `json:"errorClass,omitempty"`
	Message    string `json:"message,omitempty"`
	Retryable  *bool  `json:"retryable,omitempty"`
}

type credentialReport struct {
	Slot         string   `json:"slot"`
	Bound        bool     `json:"bound"`
	Keys         []string `json:"keys"`
	TokenPresent bool     `json:"tokenPresent"`
	TokenBytes   int      `json:"tokenBytes,omitempty"`
	TokenSHA256  string   `json:"tokenSha256Prefix,omitempty"`
}

type connectReport struct {
	Address   string `json:"address"`
	Connected bool   `json:"connected"`
	Error     string `json:"error,omitempty"`
	Millis    int64  `json:"millis"`
}

type output struct {
	Message         string           `json:"message"`
	IdempotencyKey  string           `json:"idempotencyKey"`
	StepType        string           `json:"stepType"`
	ProtocolVersion int              `json:"protocolVersion"`
	Credential      credentialReport `json:"credential"`
	Connect         *connectReport   `json:"connect,omitempty"`
}

// validationError is a problem with the inputs or the environment the step was given.
type validationError struct{ text string }

func (e validationError) Error() string { return e.text }

func invalid(format string, args ...any) error {
	return validationError{fmt.Sprintf(format, args...)}
}

func main() {
	os.Exit(run(os.Getenv, os.Stderr))
}

// run is the whole step: getenv supplies the protocol's environment, logs receives
// one line per outcome. It returns the exit code.
func run(getenv func(string) string, logs io.Writer) int {
	resultPath := orDefault(getenv("TOWLINE_RESULT_PATH"), defaultResultPath)
	in, err := readInputs(getenv)
	if err != nil {
		return finish(resultPath, logs, failure("validation", err.Error(), false), exitValidation)
	}
	switch in.fail {
	case "transient":
		return finish(resultPath, logs, failure("transient", "failing on purpose (fail: transient)", true), exitRetryable)
	case "permanent":
		return finish(resultPath, logs, failure("permanent", "failing on purpose (fail: permanent)", false), exitPermanent)
	case "invalid-result":
		broken := []byte(`{"version":1,"ok":"yes","output":{"note":"this document breaks the step protocol on purpose"}}`)
		return writeRaw(resultPath, logs, broken, exitOK)
	case "oversized-result":
		padding := strings.Repeat("x", 2*resultLimitBytes)
		oversized, _ := json.Marshal(result{Version: protocolVersion, OK: true, Output: map[string]string{"padding": padding}})
		return writeRaw(resultPath, logs, oversized, exitOK)
	case "no-result":
		fmt.Fprintln(logs, "tcp-probe: exiting without a result document on purpose (fail: no-result)")
		return exitRetryable
	}
	out := output{
		Message:         in.message,
		IdempotencyKey:  getenv("TOWLINE_IDEMPOTENCY_KEY"),
		StepType:        getenv("TOWLINE_STEP_TYPE"),
		ProtocolVersion: protocolVersion,
		Credential:      inspectCredential(orDefault(getenv("TOWLINE_CREDENTIALS_DIR"), defaultCredsDir)),
	}
	if in.connect != "" {
		report := probe(in.connect, dialTimeoutFor(getenv("TOWLINE_DEADLINE_SECONDS")))
		out.Connect = &report
	}
	return finish(resultPath, logs, result{Version: protocolVersion, OK: true, Output: out}, exitOK)
}

func readInputs(getenv func(string) string) (inputs, error) {
	if version := getenv("TOWLINE_PROTOCOL_VERSION"); version != "" && version != strconv.Itoa(protocolVersion) {
		return inputs{}, invalid("TOWLINE_PROTOCOL_VERSION is %q; this step speaks version %d", version, protocolVersion)
	}
	path := orDefault(getenv("TOWLINE_INPUTS_PATH"), defaultInputsPath)
	file, err := os.Open(path)
	if err != nil {
		return inputs{}, invalid("cannot read the inputs file: %v", err)
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, inputsLimitBytes+1))
	if err != nil {
		return inputs{}, invalid("cannot read the inputs file: %v", err)
	}
	if len(data) > inputsLimitBytes {
		return inputs{}, invalid("the inputs file is over %d bytes", inputsLimitBytes)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return inputs{}, invalid("the inputs must be a JSON object")
	}
	var in inputs
	for name, raw := range fields {
		switch name {
		case "message":
			err = decodeString(raw, name, &in.message)
			if err == nil && len([]rune(in.message)) > maxMessageChars {
				err = invalid("inputs.message is longer than %d characters", maxMessageChars)
			}
		case "connect":
			err = decodeString(raw, name, &in.connect)
			if err == nil {
				err = checkAddress(in.connect)
			}
		case "fail":
			err = decodeString(raw, name, &in.fail)
			if err == nil && !failModes[in.fail] {
				err = invalid("inputs.fail is %q; one of %s", in.fail, strings.Join(sortedKeys(failModes), ", "))
			}
		default:
			err = invalid("inputs.%s is not an input of this step (message, connect, fail)", name)
		}
		if err != nil {
			return inputs{}, err
		}
	}
	return in, nil
}

func decodeString(raw json.RawMessage, name string, target *string) error {
	if err := json.Unmarshal(raw, target); err != nil || string(raw) == "null" {
		return invalid("inputs.%s must be a string", name)
	}
	return nil
}

func checkAddress(address string) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil || host == "" {
		return invalid("inputs.connect is %q; it must be host:port", address)
	}
	number, err := strconv.Atoi(port)
	if err != nil || number < 1 || number > 65535 {
		return invalid("inputs.connect has the port %q; it must be 1-65535", port)
	}
	return nil
}

// inspectCredential reports what the slot holds without ever returning a value.
func inspectCredential(dir string) credentialReport {
	report := credentialReport{Slot: credentialSlot, Keys: []string{}}
	slot := filepath.Join(dir, credentialSlot)
	entries, err := os.ReadDir(slot)
	if err != nil {
		return report
	}
	report.Bound = true
	for _, entry := range entries {
		// A Secret volume keeps its files behind "..data" and timestamped directories.
		if !strings.HasPrefix(entry.Name(), ".") {
			report.Keys = append(report.Keys, entry.Name())
		}
	}
	sort.Strings(report.Keys)
	value, err := os.ReadFile(filepath.Join(slot, credentialKey))
	if err != nil {
		return report
	}
	digest := sha256.Sum256(value)
	report.TokenPresent = true
	report.TokenBytes = len(value)
	report.TokenSHA256 = hex.EncodeToString(digest[:])[:hashPrefixChars]
	return report
}

// probe makes one raw TCP connect: no proxy, no guard, exactly what the network allows.
func probe(address string, timeout time.Duration) connectReport {
	started := time.Now()
	conn, err := net.DialTimeout("tcp", address, timeout)
	report := connectReport{Address: address, Millis: time.Since(started).Milliseconds()}
	if err != nil {
		report.Error = describeDialError(err)
		return report
	}
	report.Connected = true
	_ = conn.Close()
	return report
}

func describeDialError(err error) string {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		return "refused"
	default:
		return err.Error()
	}
}

// dialTimeoutFor keeps the connect within the step's deadline.
func dialTimeoutFor(deadline string) time.Duration {
	seconds, err := strconv.Atoi(deadline)
	if err != nil || seconds <= 0 || time.Duration(seconds)*time.Second >= dialTimeout {
		return dialTimeout
	}
	return time.Duration(seconds) * time.Second
}

func failure(errorClass, message string, retryable bool) result {
	return result{Version: protocolVersion, OK: false, ErrorClass: errorClass, Message: message, Retryable: &retryable}
}

// finish writes the document, or an output_too_large failure if it would not fit.
func finish(path string, logs io.Writer, document result, code int) int {
	data, err := json.Marshal(document)
	if err != nil {
		document, code = failure("permanent", "cannot encode the result: "+err.Error(), false), exitPermanent
		data, _ = json.Marshal(document)
	}
	if len(data) > resultLimitBytes {
		message := fmt.Sprintf("the result is %d bytes, over the %d-byte limit", len(data), resultLimitBytes)
		document, code = failure("output_too_large", message, false), exitPermanent
		data, _ = json.Marshal(document)
	}
	if document.OK {
		fmt.Fprintln(logs, "tcp-probe: ok")
	} else {
		fmt.Fprintf(logs, "tcp-probe: %s: %s\n", document.ErrorClass, document.Message)
	}
	return writeRaw(path, logs, data, code)
}

func writeRaw(path string, logs io.Writer, data []byte, code int) int {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		fmt.Fprintf(logs, "tcp-probe: cannot write the result document to %s: %v\n", path, err)
		return exitPermanent
	}
	return code
}

func orDefault(value, fallback string) string {
	if value == "" {
		return fallback
	}
	return value
}

func sortedKeys(set map[string]bool) []string {
	keys := make([]string, 0, len(set))
	for key := range set {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
