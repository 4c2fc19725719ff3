// Package naming holds the policy of naming.tables.example.cnpgi.io: a
// DatabaseTable (example.cnpgi.io/v1, the cnpgi-rs DatabaseTable example)
// must not name its table or a column after an SQL reserved word.
//
// The resource is not a CloudNativePG Cluster: CNPG-I calls every resource
// a "cluster", and the operator sends the DatabaseTable's JSON where
// CloudNativePG sends a Cluster's. It is decoded here as a DatabaseTable,
// not with cnpg-i-machinery's Cluster helpers.
package naming

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
)

const (
	// Group is the API group of the resources this plugin validates.
	Group = "example.cnpgi.io"
	// Kind is the kind of the resources this plugin validates.
	Kind = "DatabaseTable"
)

// reservedWords are PostgreSQL's key words that cannot name a table or a
// column unquoted: those Appendix C ("SQL Key Words") lists as "reserved"
// and as "reserved (can be function or type)"; pg_get_keywords() gives
// them as catcode R and T. The same list as the Python plugin's.
const reservedWords = `
	all analyse analyze and any array as asc asymmetric authorization binary both case cast check collate collation
	column concurrently constraint create cross current_catalog current_date current_role current_schema current_time
	current_timestamp current_user default deferrable desc distinct do else end except false fetch for foreign freeze
	from full grant group having ilike in initially inner intersect into is isnull join lateral leading left like limit
	localtime localtimestamp natural not notnull null offset on only or order outer overlaps placing primary references
	returning right select session_user similar some symmetric table tablesample then to trailing true union unique
	user using variadic verbose when where window with
`

var reserved = func() map[string]struct{} {
	words := strings.Fields(reservedWords)
	set := make(map[string]struct{}, len(words))
	for _, word := range words {
		set[word] = struct{}{}
	}
	return set
}()

// IsReserved tells whether name is an SQL reserved word (in any case).
func IsReserved(name string) bool {
	_, found := reserved[strings.ToLower(name)]
	return found
}

// DatabaseTable is the part of a DatabaseTable this policy reads. Other
// fields (serverName, references, the cnpgi.io/references the operator
// adds...) are ignored.
type DatabaseTable struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   Metadata          `json:"metadata"`
	Spec       DatabaseTableSpec `json:"spec"`
}

// Metadata is the part of a resource's metadata the plugin logs.
type Metadata struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// DatabaseTableSpec holds the names of a table and its columns.
type DatabaseTableSpec struct {
	// Name is the table's name in the database.
	Name string `json:"name"`
	// Columns are its columns, in order.
	Columns []Column `json:"columns"`
}

// Column is one column of a DatabaseTable.
type Column struct {
	// Name is the column's name.
	Name string `json:"name"`
}

// DecodeError says why a definition is not a DatabaseTable.
type DecodeError struct {
	Reason string
}

func (e *DecodeError) Error() string {
	return "the definition is not a " + Kind + " (" + Group + "): " + e.Reason
}

// Decode reads a DatabaseTable from the JSON the operator sends
// (OperatorValidateClusterCreateRequest.definition, ...). A resource of
// another kind (a CloudNativePG Cluster, say) is refused.
func Decode(definition []byte) (*DatabaseTable, error) {
	if trimmed := bytes.TrimSpace(definition); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &DecodeError{Reason: "not a JSON object"}
	}
	var table DatabaseTable
	if err := json.Unmarshal(definition, &table); err != nil {
		return nil, &DecodeError{Reason: err.Error()}
	}
	if table.Kind != "" && table.Kind != Kind {
		return nil, &DecodeError{Reason: fmt.Sprintf("its kind is %q", table.Kind)}
	}
	if group, _, found := strings.Cut(table.APIVersion, "/"); table.APIVersion != "" && (!found || group != Group) {
		return nil, &DecodeError{Reason: fmt.Sprintf("its apiVersion is %q", table.APIVersion)}
	}
	return &table, nil
}

// Validate returns one ValidationError per reserved word the table uses as
// its name or a column's, each with the path of its field:
// ["spec", "name"] and ["spec", "columns", "<i>", "name"] (the operator
// renders them spec.name and spec.columns[<i>].name).
func Validate(table *DatabaseTable) []*operator.ValidationError {
	var errors []*operator.ValidationError
	check := func(name string, path ...string) {
		if IsReserved(name) {
			errors = append(errors, &operator.ValidationError{
				PathComponents: path,
				Value:          name,
				Message:        fmt.Sprintf("%q is a reserved word in SQL: choose another name", name),
			})
		}
	}
	check(table.Spec.Name, "spec", "name")
	for i, column := range table.Spec.Columns {
		check(column.Name, "spec", "columns", strconv.Itoa(i), "name")
	}
	return errors
}

// ValidateDefinition decodes definition as a DatabaseTable and validates it.
func ValidateDefinition(definition []byte) ([]*operator.ValidationError, error) {
	table, err := Decode(definition)
	if err != nil {
		return nil, err
	}
	return Validate(table), nil
}
