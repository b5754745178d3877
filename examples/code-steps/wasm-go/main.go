// Command enrich is a Towline code.wasm step written in Go: it reads a JSON
// object from stdin, writes a JSON object to stdout and logs to stderr.
// Build it for WASI preview 1: GOOS=wasip1 GOARCH=wasm go build -o enrich.wasm .
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type item struct {
	Name  string  `json:"name"`
	Price float64 `json:"price"`
}

type order struct {
	Items   []item  `json:"items"`
	TaxRate float64 `json:"taxRate"`
}

func main() {
	var in order
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&in); err != nil {
		fmt.Fprintf(os.Stderr, "enrich: bad input: %v\n", err)
		os.Exit(1)
	}
	total := 0.0
	for _, it := range in.Items {
		total += it.Price
	}
	fmt.Fprintf(os.Stderr, "enrich: %d items\n", len(in.Items))
	out := map[string]any{"count": len(in.Items), "total": total, "totalWithTax": total * (1 + in.TaxRate)}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "enrich: writing the output: %v\n", err)
		os.Exit(1)
	}
}
