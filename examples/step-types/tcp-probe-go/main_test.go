package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// step is one run of the step in a temporary protocol layout.
type step struct {
	t      *testing.T
	dir    string
	env    map[string]string
	stderr bytes.Buffer
}

func newStep(t *testing.T, inputs string) *step {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "inputs.json"), []byte(inputs), 0o600); err != nil {
		t.Fatal(err)
	}
	return &step{t: t, dir: dir, env: map[string]string{
		"TOWLINE_PROTOCOL_VERSION": "1",
		"TOWLINE_INPUTS_PATH":      filepath.Join(dir, "inputs.json"),
		"TOWLINE_CREDENTIALS_DIR":  filepath.Join(dir, "credentials"),
		"TOWLINE_RESULT_PATH":      filepath.Join(dir, "result.json"),
		"TOWLINE_IDEMPOTENCY_KEY":  "wf-run-uid-probe-1",
		"TOWLINE_STEP_TYPE":        "steptype/tcp-probe",
	}}
}

func (s *step) bind(key, value string) {
	s.t.Helper()
	slot := filepath.Join(s.dir, "credentials", credentialSlot)
	if err := os.MkdirAll(slot, 0o700); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(slot, key), []byte(value), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

func (s *step) run() (int, string) {
	code := run(func(name string) string { return s.env[name] }, &s.stderr)
	data, err := os.ReadFile(s.env["TOWLINE_RESULT_PATH"])
	if err != nil {
		return code, ""
	}
	return code, string(data)
}

func decode(t *testing.T, text string) map[string]any {
	t.Helper()
	var document map[string]any
	if err := json.Unmarshal([]byte(text), &document); err != nil {
		t.Fatalf("the result is not JSON: %v: %q", err, text)
	}
	return document
}

func TestSuccessEchoesTheIdempotencyKeyAndMessage(t *testing.T) {
	s := newStep(t, `{"message": "hello"}`)
	code, text := s.run()
	if code != exitOK {
		t.Fatalf("exit %d, want 0: %s", code, s.stderr.String())
	}
	document := decode(t, text)
	out := document["output"].(map[string]any)
	if document["ok"] != true || out["idempotencyKey"] != "wf-run-uid-probe-1" || out["message"] != "hello" {
		t.Fatalf("unexpected result %s", text)
	}
	if out["stepType"] != "steptype/tcp-probe" {
		t.Fatalf("stepType %v", out["stepType"])
	}
}

func TestCredentialIsReportedButNeverWritten(t *testing.T) {
	s := newStep(t, `{}`)
	s.bind("token", "canary-secret-value")
	code, text := s.run()
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(text, "canary-secret-value") || strings.Contains(s.stderr.String(), "canary-secret-value") {
		t.Fatal("the credential's value left the step")
	}
	credential := decode(t, text)["output"].(map[string]any)["credential"].(map[string]any)
	if credential["bound"] != true || credential["tokenPresent"] != true || credential["tokenBytes"] != float64(19) {
		t.Fatalf("credential report %v", credential)
	}
	if len(credential["tokenSha256Prefix"].(string)) != hashPrefixChars {
		t.Fatalf("hash prefix %v", credential["tokenSha256Prefix"])
	}
}

func TestUnboundSlotIsReportedAbsent(t *testing.T) {
	s := newStep(t, `{}`)
	_, text := s.run()
	credential := decode(t, text)["output"].(map[string]any)["credential"].(map[string]any)
	if credential["bound"] != false || credential["tokenPresent"] != false {
		t.Fatalf("credential report %v", credential)
	}
}

func TestConnectReportsWhetherTheTCPConnectGotThrough(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := listener.Addr().String()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	closed.Close()
	defer listener.Close()
	for address, want := range map[string]bool{open: true, refusing: false} {
		s := newStep(t, `{"connect": "`+address+`"}`)
		_, text := s.run()
		connect := decode(t, text)["output"].(map[string]any)["connect"].(map[string]any)
		if connect["connected"] != want {
			t.Fatalf("connect %s: %v, want connected=%v", address, connect, want)
		}
	}
}

func TestFailuresCarryTheirClassAndExitCode(t *testing.T) {
	cases := []struct {
		fail, class string
		code        int
		retryable   bool
	}{
		{"transient", "transient", exitRetryable, true},
		{"permanent", "permanent", exitPermanent, false},
	}
	for _, c := range cases {
		s := newStep(t, `{"fail": "`+c.fail+`"}`)
		code, text := s.run()
		document := decode(t, text)
		if code != c.code || document["ok"] != false || document["errorClass"] != c.class || document["retryable"] != c.retryable {
			t.Fatalf("fail %s: exit %d, %s", c.fail, code, text)
		}
	}
}

func TestBadInputsAreAValidationFailure(t *testing.T) {
	for _, inputs := range []string{`[]`, `{"connect": "no-port"}`, `{"fail": "sometimes"}`, `{"colour": "red"}`, `{"message": 3}`, `not json`} {
		s := newStep(t, inputs)
		code, text := s.run()
		document := decode(t, text)
		if code != exitValidation || document["errorClass"] != "validation" {
			t.Fatalf("inputs %s: exit %d, %s", inputs, code, text)
		}
	}
}

func TestAnotherProtocolVersionIsRefused(t *testing.T) {
	s := newStep(t, `{}`)
	s.env["TOWLINE_PROTOCOL_VERSION"] = "2"
	code, text := s.run()
	if code != exitValidation || decode(t, text)["errorClass"] != "validation" {
		t.Fatalf("exit %d, %s", code, text)
	}
}

func TestBrokenResultsAreWrittenOnRequest(t *testing.T) {
	s := newStep(t, `{"fail": "invalid-result"}`)
	code, text := s.run()
	if code != exitOK || decode(t, text)["ok"] != "yes" {
		t.Fatalf("invalid-result: exit %d, %s", code, text)
	}
	s = newStep(t, `{"fail": "oversized-result"}`)
	code, text = s.run()
	if code != exitOK || len(text) <= resultLimitBytes {
		t.Fatalf("oversized-result: exit %d, %d bytes", code, len(text))
	}
	s = newStep(t, `{"fail": "no-result"}`)
	code, text = s.run()
	if code != exitRetryable || text != "" {
		t.Fatalf("no-result: exit %d, %q", code, text)
	}
}

func TestAResultOverTheLimitBecomesOutputTooLarge(t *testing.T) {
	s := newStep(t, `{}`)
	document := result{Version: protocolVersion, OK: true, Output: strings.Repeat("y", resultLimitBytes)}
	code := finish(s.env["TOWLINE_RESULT_PATH"], &s.stderr, document, exitOK)
	data, _ := os.ReadFile(s.env["TOWLINE_RESULT_PATH"])
	if code != exitPermanent || decode(t, string(data))["errorClass"] != "output_too_large" {
		t.Fatalf("exit %d, %s", code, data)
	}
}
