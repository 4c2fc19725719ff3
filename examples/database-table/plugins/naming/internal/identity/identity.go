// Package identity implements the CNPG-I Identity service of
// naming.tables.example.cnpgi.io: who it is, that it offers the Operator
// service, and that it is ready.
package identity

import (
	"context"

	"github.com/cloudnative-pg/cnpg-i/pkg/identity"
)

// Name is the plugin's name, as DatabaseTables list it in spec.policies.
const Name = "naming.tables.example.cnpgi.io"

// Version is the plugin's version (set at build time with
// -ldflags "-X github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/identity.Version=...").
var Version = "0.1.0"

// Metadata is what GetPluginMetadata answers.
func Metadata() *identity.GetPluginMetadataResponse {
	return &identity.GetPluginMetadataResponse{
		Name:          Name,
		Version:       Version,
		DisplayName:   "Table naming policy",
		Description:   "Refuses DatabaseTables whose table or column names are SQL reserved words",
		ProjectUrl:    "https://github.com/cnpgi-rs/cnpgi-rs",
		RepositoryUrl: "https://github.com/cnpgi-rs/cnpgi-rs",
		License:       "Apache-2.0",
		LicenseUrl:    "https://www.apache.org/licenses/LICENSE-2.0",
		Maturity:      "alpha",
		Vendor:        "cnpgi-rs examples",
	}
}

// Implementation is the Identity service.
type Implementation struct {
	identity.UnimplementedIdentityServer
}

// GetPluginMetadata answers the plugin's name, version and description.
func (Implementation) GetPluginMetadata(
	context.Context,
	*identity.GetPluginMetadataRequest,
) (*identity.GetPluginMetadataResponse, error) {
	return Metadata(), nil
}

// GetPluginCapabilities answers that the plugin offers the Operator service.
func (Implementation) GetPluginCapabilities(
	context.Context,
	*identity.GetPluginCapabilitiesRequest,
) (*identity.GetPluginCapabilitiesResponse, error) {
	return &identity.GetPluginCapabilitiesResponse{
		Capabilities: []*identity.PluginCapability{{
			Type: &identity.PluginCapability_Service_{
				Service: &identity.PluginCapability_Service{
					Type: identity.PluginCapability_Service_TYPE_OPERATOR_SERVICE,
				},
			},
		}},
	}, nil
}

// Probe answers ready: the plugin needs nothing to serve.
func (Implementation) Probe(context.Context, *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	return &identity.ProbeResponse{Ready: true}, nil
}
