// Writes the protobuf descriptors compiled into upstream's Go stubs
// (github.com/cloudnative-pg/cnpg-i, every package) as one encoded
// FileDescriptorSet, so that wire_compat.py can hold this project's proto/
// to them definition by definition.
//
// Usage: godescriptors OUT.bin
package main

import (
	"fmt"
	"os"
	"strings"

	_ "github.com/cloudnative-pg/cnpg-i/pkg/backup"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/identity"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/lifecycle"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/metrics"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/operator"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/postgres"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/reconciler"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/restore/job"
	_ "github.com/cloudnative-pg/cnpg-i/pkg/wal"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: godescriptors OUT.bin")
		os.Exit(2)
	}
	set := &descriptorpb.FileDescriptorSet{}
	protoregistry.GlobalFiles.RangeFiles(func(file protoreflect.FileDescriptor) bool {
		if strings.HasPrefix(string(file.Package()), "cnpgi.") {
			set.File = append(set.File, protodesc.ToFileDescriptorProto(file))
		}
		return true
	})
	out, err := proto.Marshal(set)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d upstream files\n", len(set.File))
}
