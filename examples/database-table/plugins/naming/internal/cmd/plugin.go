// Package cmd holds the plugin command: cnpg-i-machinery's CreateMainCmd
// (mutual TLS or a Unix socket), the environment variables of the cnpgi-rs
// SDK's flags, and registration with a cnpgi-rs operator.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cloudnative-pg/cnpg-i-machinery/pkg/pluginhelper/http"
	"github.com/cloudnative-pg/cnpg-i/pkg/operator"
	"github.com/cloudnative-pg/machinery/pkg/log"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"google.golang.org/grpc"

	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/identity"
	operatorimpl "github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/operator"
	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/registration"
)

// environment maps each flag to the environment variable the cnpgi-rs SDK
// (and the Python plugins) read for it: a flag given wins over its variable.
var environment = map[string]string{
	"server-address":    "SERVER_ADDRESS",
	"server-cert":       "SERVER_CERT",
	"server-key":        "SERVER_KEY",
	"client-cert":       "CLIENT_CERT",
	"plugin-path":       "PLUGIN_PATH",
	"register-with":     "CNPGI_REGISTER_WITH",
	"registration-ca":   "CNPGI_REGISTRATION_CA",
	"registration-cert": "CNPGI_REGISTRATION_CERT",
	"registration-key":  "CNPGI_REGISTRATION_KEY",
	"advertise-address": "CNPGI_ADVERTISE_ADDRESS",
}

// registrationFlags are the flags this plugin adds to machinery's.
var registrationFlags = []struct{ name, help string }{
	{"register-with", "Register with a cnpgi-rs operator at HOST:PORT (its registration endpoint, mutual TLS) " +
		"and keep heart-beating, so that it dials this plugin at --advertise-address. Needs --server-address and " +
		"the certificate flags, and --registration-ca. Not part of CNPG-I: CloudNativePG has no such endpoint"},
	{"registration-ca", "PEM certificate the operator's registration endpoint must chain to"},
	{"registration-cert", "PEM certificate presented when registering (its DNS name is the plugin name; " +
		"default --server-cert)"},
	{"registration-key", "PEM key of --registration-cert (default --server-key)"},
	{"advertise-address", "HOST:PORT where the operator dials this plugin (the server certificate must carry HOST); " +
		"default: --server-address, unless its host is unspecified or its port 0"},
}

// NewPluginCmd is the `plugin` command: it serves the Identity and Operator
// services, and registers with an operator when --register-with is given.
func NewPluginCmd() *cobra.Command {
	cmd := http.CreateMainCmd(identity.Implementation{}, func(server *grpc.Server) error {
		operator.RegisterOperatorServer(server, operatorimpl.Implementation{})
		return nil
	})
	cmd.Use = "plugin"
	cmd.Short = "Serve the plugin over gRPC: mutual TLS (--server-address) or a Unix socket (--plugin-path)"
	cmd.Long = cmd.Short + ". Every flag can also come from an environment variable, named in its help " +
		"(the cnpgi-rs SDK's names)."
	cmd.SilenceUsage = true
	// Machinery's flag groups (the four TLS flags together, a socket or TLS)
	// count flags only: a Deployment giving the certificates in the
	// environment and the address as a flag would be refused. The same
	// rules are checked on flags and environment alike (registrationTarget).
	cmd.Flags().VisitAll(func(flag *pflag.Flag) {
		delete(flag.Annotations, "cobra_annotation_required_if_others_set")
		delete(flag.Annotations, "cobra_annotation_mutually_exclusive")
	})
	for _, flag := range registrationFlags {
		cmd.Flags().String(flag.name, "", flag.help)
		_ = viper.BindPFlag(flag.name, cmd.Flags().Lookup(flag.name))
	}
	for name, env := range environment {
		_ = viper.BindEnv(name, env)
		if flag := cmd.Flags().Lookup(name); flag != nil {
			flag.Usage += fmt.Sprintf(" (env %s)", env)
		}
	}
	serve := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		target, err := registrationTarget()
		if err != nil {
			return err
		}
		if target == nil {
			return serve(cmd, args)
		}
		return serveRegistered(cmd, args, serve, *target)
	}
	return cmd
}

// serveRegistered serves and, beside, keeps the plugin registered; an
// unusable registration configuration stops the server.
func serveRegistered(
	cmd *cobra.Command,
	args []string,
	serve func(*cobra.Command, []string) error,
	target registration.Target,
) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	cmd.SetContext(ctx)
	logger := log.FromContext(ctx).GetLogger().WithName("registration")
	registered := make(chan error, 1)
	go func() {
		waitListening(ctx, viper.GetString("server-address"))
		err := registration.KeepRegistered(ctx, logger, target, identity.Name, identity.Version,
			registration.DefaultTiming)
		if errors.Is(err, registration.ErrConfiguration) {
			logger.Error(err, "stopping the plugin")
			cancel()
		}
		registered <- err
	}()
	serveErr := serve(cmd, args)
	cancel()
	registerErr := <-registered
	if serveErr != nil {
		return serveErr
	}
	if errors.Is(registerErr, registration.ErrConfiguration) {
		return registerErr
	}
	return nil
}

// registrationTarget checks the flags (from the command line or the
// environment) and says where to register, or nil when --register-with is
// not given.
func registrationTarget() (*registration.Target, error) {
	get := viper.GetString
	tls := []string{get("server-address"), get("server-cert"), get("server-key"), get("client-cert")}
	given := 0
	for _, value := range tls {
		if value != "" {
			given++
		}
	}
	if given != 0 && given != len(tls) {
		return nil, errors.New("--server-address, --server-cert, --server-key and --client-cert " +
			"(SERVER_ADDRESS, SERVER_CERT, SERVER_KEY, CLIENT_CERT) go together")
	}
	if given != 0 && get("plugin-path") != "" {
		return nil, errors.New("--plugin-path (PLUGIN_PATH) and --server-address (SERVER_ADDRESS) exclude each other: " +
			"the plugin serves a Unix socket or mutual TLS")
	}
	if (get("registration-cert") == "") != (get("registration-key") == "") {
		return nil, errors.New("--registration-cert and --registration-key " +
			"(CNPGI_REGISTRATION_CERT, CNPGI_REGISTRATION_KEY) go together")
	}
	if get("register-with") == "" {
		for _, name := range []string{"registration-ca", "registration-cert", "registration-key", "advertise-address"} {
			if get(name) != "" {
				return nil, fmt.Errorf("--%s (%s) needs --register-with (CNPGI_REGISTER_WITH)", name, environment[name])
			}
		}
		return nil, nil
	}
	if given == 0 || get("registration-ca") == "" {
		return nil, errors.New("--register-with (CNPGI_REGISTER_WITH) needs --server-address and the certificate flags " +
			"(the operator dials the plugin with mutual TLS) and --registration-ca (CNPGI_REGISTRATION_CA)")
	}
	advertise := get("advertise-address")
	if advertise == "" {
		host, port, err := net.SplitHostPort(get("server-address"))
		if err != nil {
			return nil, fmt.Errorf("--server-address (SERVER_ADDRESS) %q: %w", get("server-address"), err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) || port == "0" {
			return nil, fmt.Errorf("--register-with needs --advertise-address (CNPGI_ADVERTISE_ADDRESS): the plugin "+
				"listens on %q (every interface, or a port the system picks), and the operator needs a host:port to dial",
				get("server-address"))
		}
		advertise = get("server-address")
	}
	cert, key := get("registration-cert"), get("registration-key")
	if cert == "" {
		cert, key = get("server-cert"), get("server-key")
	}
	return &registration.Target{
		Endpoint:  get("register-with"),
		CA:        get("registration-ca"),
		Cert:      cert,
		Key:       key,
		Advertise: advertise,
	}, nil
}

// waitListening waits, a few seconds at most, until the server accepts
// connections on address: the operator probes the plugin before it answers
// Register. Registration goes on anyway after that (and retries).
func waitListening(ctx context.Context, address string) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	dialer := net.Dialer{Timeout: time.Second}
	for range 50 {
		conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
