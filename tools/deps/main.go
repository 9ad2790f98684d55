package main
import (
 _ "github.com/spf13/cobra"
 _ "modernc.org/sqlite"
 _ "github.com/docker/docker/client"
 _ "connectrpc.com/connect"
 _ "google.golang.org/protobuf/proto"
 _ "github.com/creack/pty"
 _ "golang.org/x/sys/unix"
 _ "github.com/google/uuid"
 _ "github.com/fsnotify/fsnotify"
)
func main(){}
