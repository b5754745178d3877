// Command cesdk sends and receives CloudEvents with the CloudEvents SDK for Go
// (github.com/cloudevents/sdk-go/v2, the version go.mod pins), so the tests can show that Towline's
// ingress takes what that SDK sends and that the SDK parses what Towline's events sink sends.
//
// We wrote this command, but every byte on the wire is the SDK's: `send` builds the event and the
// request with the SDK's own HTTP client (cloudevents.NewClientHTTP, its structured or binary
// encoding, cehttp.WithHeader for the bearer), and `receive` parses each request with the SDK's own
// HTTP message reader and binding.ToEvent. Built by towline_dev.cesdk from the Go module proxy.
//
//	cesdk send -url URL -mode structured|binary -type T -source S [-id ID] [-subject S] [-data JSON] [-bearer-file F]
//	    one event; prints {"status": <HTTP status>, "ack": <bool>, "error": "..."} as one JSON line.
//	cesdk receive (-listen ADDR | -listen-fd N) -out FILE
//	    one JSON line per request to FILE: its headers, raw body, encoding, the event the SDK parsed
//	    (or the SDK's error, then answered 400).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: cesdk send|receive [flags]")
	}
	switch os.Args[1] {
	case "send":
		send(os.Args[2:])
	case "receive":
		receive(os.Args[2:])
	default:
		fail("unknown command %q: use send or receive", os.Args[1])
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cesdk: "+format+"\n", args...)
	os.Exit(2)
}

type sent struct {
	Status int    `json:"status"`
	Ack    bool   `json:"ack"`
	Error  string `json:"error"`
}

func send(args []string) {
	flags := flag.NewFlagSet("send", flag.ExitOnError)
	url := flags.String("url", "", "where to POST the event")
	mode := flags.String("mode", "binary", "the HTTP binding's mode: structured or binary")
	eventType := flags.String("type", "", "the event's type")
	source := flags.String("source", "", "the event's source")
	id := flags.String("id", "", "the event's id (empty: the SDK makes a UUID)")
	subject := flags.String("subject", "", "the event's subject (empty: none)")
	data := flags.String("data", "", "the event's data, JSON (empty: none)")
	bearerFile := flags.String("bearer-file", "", "a file whose content is sent as `Authorization: Bearer <content>`")
	_ = flags.Parse(args)
	if *url == "" || *eventType == "" || *source == "" {
		fail("send needs -url, -type and -source")
	}

	options := []cehttp.Option{cloudevents.WithTarget(*url)}
	if *bearerFile != "" {
		token, err := os.ReadFile(*bearerFile)
		if err != nil {
			fail("reading -bearer-file: %v", err)
		}
		options = append(options, cloudevents.WithHeader("Authorization", "Bearer "+strings.TrimSpace(string(token))))
	}
	client, err := cloudevents.NewClientHTTP(options...)
	if err != nil {
		fail("the SDK's client: %v", err)
	}

	event := cloudevents.NewEvent()
	event.SetType(*eventType)
	event.SetSource(*source)
	if *id != "" {
		event.SetID(*id)
	}
	if *subject != "" {
		event.SetSubject(*subject)
	}
	if *data != "" {
		var value any
		if err := json.Unmarshal([]byte(*data), &value); err != nil {
			fail("-data is not JSON: %v", err)
		}
		if err := event.SetData(cloudevents.ApplicationJSON, value); err != nil {
			fail("the SDK refused the data: %v", err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch *mode {
	case "structured":
		ctx = cloudevents.WithEncodingStructured(ctx)
	case "binary":
		ctx = cloudevents.WithEncodingBinary(ctx)
	default:
		fail("-mode is %q: use structured or binary", *mode)
	}

	result := client.Send(ctx, event)
	answer := sent{Ack: cloudevents.IsACK(result)}
	var httpResult *cehttp.Result
	if cloudevents.ResultAs(result, &httpResult) {
		answer.Status = httpResult.StatusCode
	}
	if result != nil && !answer.Ack {
		answer.Error = result.Error()
	}
	line, _ := json.Marshal(answer)
	fmt.Println(string(line))
	if answer.Status == 0 {
		os.Exit(1) // no HTTP answer at all (refused connection, timeout): the error says which
	}
}

type received struct {
	Headers  map[string]string  `json:"headers"`
	Body     string             `json:"body"`
	Encoding string             `json:"encoding"`
	Event    *cloudevents.Event `json:"event"`
	Error    string             `json:"error"`
}

func receive(args []string) {
	flags := flag.NewFlagSet("receive", flag.ExitOnError)
	listen := flags.String("listen", "", "the address to listen at, host:port")
	listenFD := flags.Int("listen-fd", 0, "an inherited listening socket's descriptor (instead of -listen)")
	out := flags.String("out", "", "the file to append one JSON line per request to")
	_ = flags.Parse(args)
	if *out == "" || (*listen == "") == (*listenFD == 0) {
		fail("receive needs -out and one of -listen or -listen-fd")
	}
	var listener net.Listener
	var err error
	if *listenFD != 0 {
		listener, err = net.FileListener(os.NewFile(uintptr(*listenFD), "listener"))
	} else {
		listener, err = net.Listen("tcp", *listen)
	}
	if err != nil {
		fail("listening: %v", err)
	}
	file, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fail("opening -out: %v", err)
	}
	var lock sync.Mutex
	fmt.Fprintf(os.Stderr, "cesdk: receiving at %s\n", listener.Addr())
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		record := received{Headers: map[string]string{}, Body: string(body)}
		for name, values := range r.Header {
			record.Headers[strings.ToLower(name)] = strings.Join(values, ", ")
		}
		// The SDK reads the request as it came: the body is given back to it unread.
		r.Body = io.NopCloser(bytes.NewReader(body))
		message := cehttp.NewMessageFromHttpRequest(r)
		record.Encoding = message.ReadEncoding().String()
		event, err := binding.ToEvent(r.Context(), message)
		if err == nil {
			err = event.Validate()
		}
		_ = message.Finish(err)
		status := http.StatusAccepted
		if err != nil {
			record.Error = err.Error()
			status = http.StatusBadRequest
		} else {
			record.Event = event
		}
		line, _ := json.Marshal(record)
		lock.Lock()
		_, writeErr := file.Write(append(line, '\n'))
		lock.Unlock()
		if writeErr != nil {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
	})
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	if err := server.Serve(listener); err != nil {
		fail("serving: %v", err)
	}
}
