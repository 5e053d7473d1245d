package server_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/potato-k3/potato-k3/kernel/server"
)

// A resident engine on a model directory, listening on a unix socket until SIGTERM. (Not run by go
// test: it serves until a signal.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(ctx, server.Config{ModelDir: "/models/k3-tiny", SpillDir: "/var/cache/potato/spill"})
	if err != nil {
		log.Fatal(err)
	}
	l, err := server.Listen("unix:/run/potato/potato.sock")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	<-ctx.Done()
	if err := srv.Shutdown(context.Background()); err != nil { // finishes the wave in flight
		log.Print(err)
	}
}
