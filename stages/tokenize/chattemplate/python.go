package chattemplate

// PythonStr returns CPython's str() of the value json.loads(doc) returns: True, None, 1.0, 1e+100,
// [1, 'a'], {'k': None}, a string as itself. Integers keep every digit.
func PythonStr(doc []byte) (string, error) {
	v, err := decodeJSON(doc)
	if err != nil {
		return "", err
	}
	return pyStr(v)
}

// PythonJSON returns json.dumps(json.loads(doc), ensure_ascii=ensureASCII) with the default
// separators (", " and ": ") and key order as in doc.
func PythonJSON(doc []byte, ensureASCII bool) (string, error) {
	v, err := decodeJSON(doc)
	if err != nil {
		return "", err
	}
	return pyJSONDumps(v, jsonOptions{ensureASCII: ensureASCII, itemSep: ", ", keySep: ": "})
}
