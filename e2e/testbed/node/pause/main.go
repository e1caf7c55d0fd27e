// Command pause is the test bed's pod sandbox process: it holds a pod's namespaces open and
// does nothing else until the kubelet stops the sandbox. Static (CGO_ENABLED=0), so its image
// is this one file. (The test bed's pods do not share a PID namespace, so it reaps nothing.)
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
