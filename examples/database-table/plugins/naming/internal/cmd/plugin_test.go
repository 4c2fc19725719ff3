package cmd

import (
	"strings"
	"testing"

	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/registration"
)

func TestRegistrationSettingsFromTheEnvironment(t *testing.T) {
	tls := map[string]string{
		"SERVER_ADDRESS": "127.0.0.1:9090", "SERVER_CERT": "s.crt", "SERVER_KEY": "s.key", "CLIENT_CERT": "ca.crt",
	}
	with := func(extra map[string]string) map[string]string {
		all := map[string]string{}
		for k, v := range tls {
			all[k] = v
		}
		for k, v := range extra {
			all[k] = v
		}
		return all
	}
	for _, c := range []struct {
		name   string
		env    map[string]string
		target *registration.Target
		says   string
	}{
		{"a Unix socket", map[string]string{"PLUGIN_PATH": "/plugins"}, nil, ""},
		{"mutual TLS", tls, nil, ""},
		{"half the TLS flags", map[string]string{"SERVER_ADDRESS": ":9090", "SERVER_CERT": "s.crt"}, nil, "go together"},
		{"a socket and TLS", with(map[string]string{"PLUGIN_PATH": "/plugins"}), nil, "exclude each other"},
		{
			"registering with the server certificate",
			with(map[string]string{"CNPGI_REGISTER_WITH": "operator:9091", "CNPGI_REGISTRATION_CA": "op.crt"}),
			&registration.Target{Endpoint: "operator:9091", CA: "op.crt", Cert: "s.crt", Key: "s.key", Advertise: "127.0.0.1:9090"},
			"",
		},
		{
			"registering with a client certificate, advertising a Service",
			with(map[string]string{
				"SERVER_ADDRESS": ":9090", "CNPGI_REGISTER_WITH": "operator:9091", "CNPGI_REGISTRATION_CA": "op.crt",
				"CNPGI_REGISTRATION_CERT": "c.crt", "CNPGI_REGISTRATION_KEY": "c.key",
				"CNPGI_ADVERTISE_ADDRESS": "naming.tables.svc:9090",
			}),
			&registration.Target{Endpoint: "operator:9091", CA: "op.crt", Cert: "c.crt", Key: "c.key", Advertise: "naming.tables.svc:9090"},
			"",
		},
		{
			"registering from every interface without an address to advertise",
			with(map[string]string{"SERVER_ADDRESS": "0.0.0.0:9090", "CNPGI_REGISTER_WITH": "op:1", "CNPGI_REGISTRATION_CA": "op.crt"}),
			nil, "needs --advertise-address",
		},
		{
			"registering from a port the system picks",
			with(map[string]string{"SERVER_ADDRESS": "127.0.0.1:0", "CNPGI_REGISTER_WITH": "op:1", "CNPGI_REGISTRATION_CA": "op.crt"}),
			nil, "needs --advertise-address",
		},
		{"registering without TLS", map[string]string{"PLUGIN_PATH": "/p", "CNPGI_REGISTER_WITH": "op:1", "CNPGI_REGISTRATION_CA": "op.crt"}, nil, "needs --server-address"},
		{"registering without a CA", with(map[string]string{"CNPGI_REGISTER_WITH": "op:1"}), nil, "--registration-ca"},
		{"a registration certificate without its key", with(map[string]string{"CNPGI_REGISTER_WITH": "op:1", "CNPGI_REGISTRATION_CA": "op.crt", "CNPGI_REGISTRATION_CERT": "c.crt"}), nil, "go together"},
		{"a registration flag without --register-with", with(map[string]string{"CNPGI_ADVERTISE_ADDRESS": "x:1"}), nil, "needs --register-with"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, env := range environment {
				t.Setenv(env, c.env[env])
			}
			NewPluginCmd() // binds the flags and their variables
			target, err := registrationTarget()
			switch {
			case c.says != "":
				if err == nil || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("%v, want an error saying %q", err, c.says)
				}
			case err != nil:
				t.Fatal(err)
			case (target == nil) != (c.target == nil) || (target != nil && *target != *c.target):
				t.Fatalf("target %+v, want %+v", target, c.target)
			}
		})
	}
}

func TestFlagsAndTheEnvironmentMix(t *testing.T) {
	for _, env := range environment {
		t.Setenv(env, "")
	}
	t.Setenv("CLIENT_CERT", "ca.crt")
	cmd := NewPluginCmd()
	if err := cmd.ParseFlags([]string{"--server-address=127.0.0.1:9090", "--server-cert=s.crt", "--server-key=s.key"}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		t.Fatalf("the certificates' flags with CLIENT_CERT: %v", err)
	}
	if _, err := registrationTarget(); err != nil {
		t.Fatalf("the certificates' flags with CLIENT_CERT: %v", err)
	}
}
