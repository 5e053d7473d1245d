package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// checkKeys walks a JSON document against the Go type it decodes into and refuses what encoding/json
// lets through silently: an object key given twice (the last would win) and a key that matches a field
// only when case is ignored ("Top_K" for "top_k"). Unknown keys are DisallowUnknownFields' job;
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
		return nil // a scalar
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
