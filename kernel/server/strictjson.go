package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// checkKeys walks a JSON document against the Go type it decodes into and refuses what encoding/json
// lets through silently: an object key given twice (the last would win) and a key that matches a field
// only when case is ignored ("Top_K" for "top_k"). It also refuses a value of the wrong JSON kind or out
// of its field's range, naming it by its path with indices (inputs[0].tokens[3]), where encoding/json
// names only the Go field (Input.inputs.tokens). Unknown keys are DisallowUnknownFields' job;
// json.RawMessage values (a conversation, parsed by package datasets) are not looked into.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return walkValue(dec, t, "")
}

var (
	rawMessage = reflect.TypeFor[json.RawMessage]()
	anyType    = reflect.TypeFor[any]()
)

// walkValue consumes one value of dec, which decodes into t, checking the keys of its objects.
func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return checkScalar(tok, t, path)
	}
	switch {
	case t == anyType || t == rawMessage:
	case delim == '[' && t.Kind() != reflect.Slice && t.Kind() != reflect.Array:
		return fmt.Errorf("%s: want %s, got an array", orRoot(path), kindName(t))
	case delim == '{' && t.Kind() != reflect.Struct && t.Kind() != reflect.Map:
		return fmt.Errorf("%s: want %s, got an object", orRoot(path), kindName(t))
	}
	switch {
	case delim == '[':
		elem := anyType
		if (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t != rawMessage {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case delim == '{':
		fields := map[string]reflect.Type{}
		if t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key := kt.(string)
			at := joinPath(path, key)
			if seen[key] {
				return fmt.Errorf("%s: the key is given twice", at)
			}
			seen[key] = true
			ft, known := fields[key]
			switch {
			case t.Kind() == reflect.Struct && !known:
				for name := range fields {
					if strings.EqualFold(name, key) {
						return fmt.Errorf("%s: keys are case-sensitive: did you mean %q?", at, name)
					}
				}
				ft = anyType // an unknown key: refused by the decoder, walked here for duplicates only
			case t.Kind() == reflect.Map:
				ft = t.Elem()
			case t.Kind() != reflect.Struct:
				ft = anyType
			}
			if ft == rawMessage {
				err = skipValue(dec) // opaque here: parsed by its own reader
			} else {
				err = walkValue(dec, ft, at)
			}
			if err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// checkScalar refuses a JSON scalar (tok, as a Decoder with UseNumber gives it) that t cannot hold: the
// wrong kind, a fraction or an out-of-range number for an integer. null is left to the decoder (it leaves
// the zero value).
func checkScalar(tok json.Token, t reflect.Type, path string) error {
	if tok == nil || t == anyType || t == rawMessage {
		return nil
	}
	got := map[bool]string{true: "true", false: "false"}
	var what string
	switch v := tok.(type) {
	case bool:
		if t.Kind() == reflect.Bool {
			return nil
		}
		what = got[v]
	case string:
		if t.Kind() == reflect.String {
			return nil
		}
		what = "a string"
	case json.Number:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n, err := v.Int64()
			if err != nil || reflect.Zero(t).OverflowInt(n) {
				bits := t.Bits()
				return fmt.Errorf("%s: %s is not an integer from %d to %d", orRoot(path), v, int64(-1)<<(bits-1), int64(uint64(1)<<(bits-1)-1))
			}
			return nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n, err := strconv.ParseUint(v.String(), 10, 64)
			if err != nil || reflect.Zero(t).OverflowUint(n) {
				return fmt.Errorf("%s: %s is not an integer from 0 to %d", orRoot(path), v, uint64(1)<<(t.Bits()-1)*2-1)
			}
			return nil
		case reflect.Float32, reflect.Float64:
			if _, err := v.Float64(); err != nil {
				return fmt.Errorf("%s: %s is out of range", orRoot(path), v)
			}
			return nil
		}
		what = "a number"
	default:
		return nil
	}
	return fmt.Errorf("%s: want %s, got %s", orRoot(path), kindName(t), what)
}

// kindName names the JSON value a Go type takes, for errors.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// orRoot is path, or "the request" for the document itself.
func orRoot(path string) string {
	if path == "" {
		return "the request"
	}
	return path
}

// skipValue consumes one value without looking into it.
func skipValue(dec *json.Decoder) error {
	var v json.RawMessage
	return dec.Decode(&v)
}

// jsonFields maps the JSON names of t's exported fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// joinPath names key inside path, as a.b.c.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
