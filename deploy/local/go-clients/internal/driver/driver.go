// Package driver holds what the Go scenario clients share: their command line (the same
// flags as the Java driver, deploy/local/java-driver), status lines, the stop signal and the
// send schedule. The Kafka work itself is in one program per library (cmd/*).
package driver

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Modes every program supports.
const (
	Producer     = "producer"      // one message every --interval-ms (default 200 ms)
	IdleProducer = "idle-producer" // the same with a long interval (default 30 s)
	Consumer     = "consumer"      // a group consumer that polls continuously
)

// Args is one program's command line.
type Args struct {
	Mode, App, Bootstrap, Topic, Group string
	IntervalMs                         int64
	Props                              map[string]string
}

type propFlag map[string]string

func (p propFlag) String() string { return "" }

func (p propFlag) Set(v string) error {
	key, value, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("expected key=value, got %q", v)
	}
	p[key] = value
	return nil
}

// Parse reads the command line; a missing or malformed argument exits with status 2.
func Parse(program string, known map[string]string) Args {
	fs := flag.NewFlagSet(program, flag.ExitOnError)
	a := Args{Props: map[string]string{}}
	fs.StringVar(&a.Mode, "mode", "", "producer | idle-producer | consumer")
	fs.StringVar(&a.App, "app", "", "marker naming this workload in argv (also the client id)")
	fs.StringVar(&a.Bootstrap, "bootstrap", "", "host:port[,host:port...]")
	fs.StringVar(&a.Topic, "topic", "", "topic to produce to or consume from")
	fs.StringVar(&a.Group, "group", "", "consumer group (default: the app name)")
	fs.Int64Var(&a.IntervalMs, "interval-ms", -1, "producer: ms between messages")
	fs.Var(propFlag(a.Props), "prop", "library setting key=value (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s --mode M --app A --bootstrap B --topic T "+
			"[--group G] [--interval-ms N] [--prop key=value]...\n", program)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nsettings (--prop):")
		for _, k := range sortedKeys(known) {
			fmt.Fprintf(fs.Output(), "  %-28s %s\n", k, known[k])
		}
	}
	_ = fs.Parse(os.Args[1:])
	if a.Mode == "" || a.App == "" || a.Bootstrap == "" || a.Topic == "" {
		Fail(program, "--mode, --app, --bootstrap and --topic are required")
	}
	switch a.Mode {
	case Producer, IdleProducer, Consumer:
	default:
		Fail(program, fmt.Sprintf("--mode %q: expected producer, idle-producer or consumer", a.Mode))
	}
	for k := range a.Props {
		if _, ok := known[k]; !ok {
			Fail(program, fmt.Sprintf("--prop %s: unknown setting; known: %s", k,
				strings.Join(sortedKeys(known), ", ")))
		}
	}
	if a.Group == "" {
		a.Group = a.App
	}
	if a.IntervalMs < 0 {
		a.IntervalMs = 200
		if a.Mode == IdleProducer {
			a.IntervalMs = 30000
		}
	}
	return a
}

// Brokers splits the bootstrap list.
func (a Args) Brokers() []string {
	var out []string
	for _, b := range strings.Split(a.Bootstrap, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Duration reads a setting as a Go duration ("30s") or plain milliseconds ("30000").
func (a Args) Duration(program, key string) (time.Duration, bool) {
	v, ok := a.Props[key]
	if !ok {
		return 0, false
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(ms) * time.Millisecond, true
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		Fail(program, fmt.Sprintf("--prop %s=%s: expected milliseconds or a duration", key, v))
	}
	return d, true
}

// Int reads an integer setting.
func (a Args) Int(program, key string) (int, bool) {
	v, ok := a.Props[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		Fail(program, fmt.Sprintf("--prop %s=%s: expected an integer", key, v))
	}
	return n, true
}

// Fail prints the message and exits with status 2.
func Fail(program, message string) {
	fmt.Fprintf(os.Stderr, "%s: %s\n", program, message)
	os.Exit(2)
}

// Status prints one timestamped line to stdout (the workload's log).
func Status(app, what string) {
	fmt.Printf("%s %s: %s\n", time.Now().UTC().Format("15:04:05.000"), app, what)
}

// StopContext is cancelled on SIGTERM or SIGINT. A client that has not closed 10 s later (its
// brokers gone, say) exits anyway, so a stop never waits for the launcher's SIGKILL.
func StopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		time.Sleep(10 * time.Second)
		fmt.Fprintln(os.Stderr, "not closed within 10 s of the stop signal: exiting")
		os.Exit(1)
	}()
	return ctx, cancel
}

// EveryInterval calls send at a fixed rate (the first call at once) until ctx ends. A fixed
// rate, not a sleep after each send, keeps the gaps between sends equal, so an idle timer
// fires at the same idle time every cycle.
func EveryInterval(ctx context.Context, intervalMs int64, send func(n int64)) {
	t := time.NewTicker(time.Duration(intervalMs) * time.Millisecond)
	defer t.Stop()
	for n := int64(0); ; n++ {
		send(n)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
