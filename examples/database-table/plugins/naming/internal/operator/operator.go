// Package operator implements the CNPG-I Operator service of
// naming.tables.example.cnpgi.io: ValidateClusterCreate and
// ValidateClusterChange on DatabaseTables (CNPG-I calls every resource a
// "cluster"). Every other RPC answers UNIMPLEMENTED.
package operator

import (
	"context"

	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
	"github.com/cloudnative-pg/machinery/pkg/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/naming"
)

// Implementation is the Operator service.
type Implementation struct {
	operator.UnimplementedOperatorServer
}

// GetCapabilities answers the two validations, and nothing else.
func (Implementation) GetCapabilities(
	context.Context,
	*operator.OperatorCapabilitiesRequest,
) (*operator.OperatorCapabilitiesResult, error) {
	rpc := func(kind operator.OperatorCapability_RPC_Type) *operator.OperatorCapability {
		return &operator.OperatorCapability{
			Type: &operator.OperatorCapability_Rpc{Rpc: &operator.OperatorCapability_RPC{Type: kind}},
		}
	}
	return &operator.OperatorCapabilitiesResult{Capabilities: []*operator.OperatorCapability{
		rpc(operator.OperatorCapability_RPC_TYPE_VALIDATE_CLUSTER_CREATE),
		rpc(operator.OperatorCapability_RPC_TYPE_VALIDATE_CLUSTER_CHANGE),
	}}, nil
}

// ValidateClusterCreate refuses a new DatabaseTable named, or with a column
// named, after a reserved word.
func (Implementation) ValidateClusterCreate(
	ctx context.Context,
	request *operator.OperatorValidateClusterCreateRequest,
) (*operator.OperatorValidateClusterCreateResult, error) {
	errors, err := validate(ctx, "create", request.GetDefinition())
	if err != nil {
		return nil, err
	}
	return &operator.OperatorValidateClusterCreateResult{ValidationErrors: errors}, nil
}

// ValidateClusterChange validates the new DatabaseTable as a new one: the
// names it has after the change.
func (Implementation) ValidateClusterChange(
	ctx context.Context,
	request *operator.OperatorValidateClusterChangeRequest,
) (*operator.OperatorValidateClusterChangeResult, error) {
	errors, err := validate(ctx, "change", request.GetNewCluster())
	if err != nil {
		return nil, err
	}
	return &operator.OperatorValidateClusterChangeResult{ValidationErrors: errors}, nil
}

// validate decodes and checks one DatabaseTable; a definition that is not
// one is INVALID_ARGUMENT.
func validate(ctx context.Context, what string, definition []byte) ([]*operator.ValidationError, error) {
	logger := log.FromContext(ctx)
	table, err := naming.Decode(definition)
	if err != nil {
		logger.Info("refusing a definition that is not a DatabaseTable", "validation", what, "error", err.Error())
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	errors := naming.Validate(table)
	logger.Info("validated",
		"validation", what,
		"namespace", table.Metadata.Namespace,
		"name", table.Metadata.Name,
		"errors", len(errors))
	return errors, nil
}
