package naming

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReservedWordsAreRefusedWithTheirFieldPaths(t *testing.T) {
	definition := []byte(`{
		"apiVersion": "example.cnpgi.io/v1",
		"kind": "DatabaseTable",
		"metadata": {"name": "users", "namespace": "tables"},
		"spec": {
			"name": "User",
			"serverName": "app-db",
			"columns": [{"name": "id", "type": "uint64"}, {"name": "select", "type": "string"}, {"name": "from", "type": "text"}]
		},
		"cnpgi.io/references": []
	}`)
	errs, err := ValidateDefinition(definition)
	if err != nil {
		t.Fatalf("a DatabaseTable was not decoded: %v", err)
	}
	type found struct {
		path    []string
		value   string
		message string
	}
	var got []found
	for _, e := range errs {
		got = append(got, found{e.GetPathComponents(), e.GetValue(), e.GetMessage()})
	}
	want := []found{
		{[]string{"spec", "name"}, "User", `"User" is a reserved word in SQL: choose another name`},
		{[]string{"spec", "columns", "1", "name"}, "select", `"select" is a reserved word in SQL: choose another name`},
		{[]string{"spec", "columns", "2", "name"}, "from", `"from" is a reserved word in SQL: choose another name`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("errors:\n got %q\nwant %q", got, want)
	}
}

func TestGoodNamesAreAdmitted(t *testing.T) {
	definition := []byte(`{"apiVersion": "example.cnpgi.io/v1", "kind": "DatabaseTable",
		"spec": {"name": "users", "columns": [{"name": "id"}, {"name": "user_name"}, {"name": "selected"}]}}`)
	errs, err := ValidateDefinition(definition)
	if err != nil || len(errs) != 0 {
		t.Fatalf("good names refused: %v %v", errs, err)
	}
}

func TestNoSpecNoError(t *testing.T) {
	for _, definition := range []string{`{}`, `{"spec": null}`, `{"spec": {"columns": null}}`} {
		errs, err := ValidateDefinition([]byte(definition))
		if err != nil || len(errs) != 0 {
			t.Errorf("%s: %v %v", definition, errs, err)
		}
	}
}

func TestOtherResourcesAreNotDecoded(t *testing.T) {
	for definition, reason := range map[string]string{
		`{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "spec": {"instances": 3}}`: `its kind is "Cluster"`,
		`{"apiVersion": "other.example.com/v1", "kind": "DatabaseTable"}`:                      `its apiVersion is "other.example.com/v1"`,
		`[1, 2]`:                      "not a JSON object",
		``:                            "not a JSON object",
		`{"spec": {"name": 3}}`:       "cannot unmarshal number",
		`{"spec": {"columns": "id"}}`: "cannot unmarshal string",
		`{"spec": {"name": "users"`:   "unexpected end of JSON input",
	} {
		_, err := ValidateDefinition([]byte(definition))
		var decodeErr *DecodeError
		if !errors.As(err, &decodeErr) {
			t.Errorf("%s: not refused: %v", definition, err)
			continue
		}
		if !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), "not a DatabaseTable (example.cnpgi.io)") {
			t.Errorf("%s: %q does not say %q", definition, err, reason)
		}
	}
}

func TestTheReservedWordList(t *testing.T) {
	for _, word := range []string{"user", "select", "from", "table", "SELECT", "Order", "current_user", "with"} {
		if !IsReserved(word) {
			t.Errorf("%s is not taken for reserved", word)
		}
	}
	// Non-reserved key words (usable as names unquoted) and ordinary names.
	for _, word := range []string{"name", "id", "users", "type", "key", "value", "", "select_"} {
		if IsReserved(word) {
			t.Errorf("%s is taken for reserved", word)
		}
	}
}
