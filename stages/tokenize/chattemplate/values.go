package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// decodeJSON decodes one JSON document into a template value the way Python's json.loads does:
// objects keep their key order (a later duplicate key replaces the value in place), integers stay
// integers and numbers with a fraction or exponent become floats.
func decodeJSON(data []byte) (value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec)
	if err != nil {
		return vUndef, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return vUndef, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder) (value, error) {
	tok, err := dec.Token()
	if err != nil {
		return vUndef, err
	}
	switch t := tok.(type) {
	case nil:
		return vNone, nil
	case bool:
		return boolV(t), nil
	case string:
		return str(t), nil
	case json.Number:
		return numberValue(t)
	case json.Delim:
		switch t {
		case '[':
			var items []value
			for dec.More() {
				item, err := decodeJSONValue(dec)
				if err != nil {
					return vUndef, err
				}
				items = append(items, item)
			}
			if _, err := dec.Token(); err != nil {
				return vUndef, err
			}
			return newList(items), nil
		case '{':
			d := newDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return vUndef, err
				}
				key, ok := kt.(string)
				if !ok {
					return vUndef, fmt.Errorf("object key %v is not a string", kt)
				}
				val, err := decodeJSONValue(dec)
				if err != nil {
					return vUndef, err
				}
				d.AsDict().Set(key, val)
			}
			if _, err := dec.Token(); err != nil {
				return vUndef, err
			}
			return d, nil
		}
	}
	return vUndef, fmt.Errorf("unexpected JSON token %v", tok)
}

// numberValue converts a JSON number as Python's json.loads would: int when it has no fraction or
// exponent, float otherwise. Integers beyond int64 keep all their digits (newBigInt).
func numberValue(n json.Number) (value, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return newBigInt(s), nil
		}
		return newInt(i), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return vUndef, fmt.Errorf("bad number %s: %w", s, err)
	}
	return newFloat(f), nil
}

// goValue converts a Go value given by the caller (template kwargs) to a template value. JSON text
// (json.RawMessage) is decoded preserving key order; Go maps have no order, so their keys are sorted.
func goValue(v any) (value, error) {
	switch x := v.(type) {
	case nil:
		return vNone, nil
	case value:
		return x, nil
	case json.RawMessage:
		return decodeJSON(x)
	case json.Number:
		return numberValue(x)
	case bool:
		return boolV(x), nil
	case string:
		return str(x), nil
	case int:
		return newInt(int64(x)), nil
	case int8:
		return newInt(int64(x)), nil
	case int16:
		return newInt(int64(x)), nil
	case int32:
		return newInt(int64(x)), nil
	case int64:
		return newInt(x), nil
	case uint8:
		return newInt(int64(x)), nil
	case uint16:
		return newInt(int64(x)), nil
	case uint32:
		return newInt(int64(x)), nil
	case float32:
		return newFloat(float64(x)), nil
	case float64:
		return newFloat(x), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		items := make([]value, rv.Len())
		for i := range items {
			item, err := goValue(rv.Index(i).Interface())
			if err != nil {
				return vUndef, err
			}
			items[i] = item
		}
		return newList(items), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return vUndef, fmt.Errorf("map key type %s is not string", rv.Type().Key())
		}
		keys := make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		d := newDict()
		for _, k := range keys {
			item, err := goValue(rv.MapIndex(reflect.ValueOf(k).Convert(rv.Type().Key())).Interface())
			if err != nil {
				return vUndef, err
			}
			d.AsDict().Set(k, item)
		}
		return d, nil
	case reflect.Pointer:
		if rv.IsNil() {
			return vNone, nil
		}
		return goValue(rv.Elem().Interface())
	}
	return vUndef, fmt.Errorf("unsupported template value type %T", v)
}
