// Command franz-client runs one scenario workload with franz-go (github.com/twmb/franz-go).
//
//	franz-client --mode producer|idle-producer|consumer --app NAME --bootstrap B --topic T
//	             [--group G] [--interval-ms N] [--prop key=value]...
//
// producer / idle-producer: ProduceSync of one record every interval (default 200 ms / 30 s).
// consumer: a group consumer (kgo.ConsumerGroup, eager range balancing by default) polling
// continuously from the start of the topic. franz-go's own log goes to stdout (info level
// unless --prop log.level=debug, which also logs every connection opened and closed) next to
// one status line per event. Runs until SIGTERM.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"connmon/goclients/internal/driver"
)

const program = "franz-client"

var settings = map[string]string{
	"conn.idle.timeout":  "kgo.ConnIdleTimeout (default 30s; reaped within 2x that)",
	"metadata.max.age":   "kgo.MetadataMaxAge (default 5m)",
	"metadata.min.age":   "kgo.MetadataMinAge (default 5s)",
	"session.timeout":    "kgo.SessionTimeout of a group member (default 45s)",
	"heartbeat.interval": "kgo.HeartbeatInterval (default 3s)",
	"linger":             "kgo.ProducerLinger (default 0)",
	"log.level":          "franz-go's log: none|error|warn|info|debug (default info)",
}

func main() {
	a := driver.Parse(program, settings)
	opts := options(a)
	ctx, stop := driver.StopContext()
	defer stop()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		driver.Status(a.App, "failed: "+err.Error())
		os.Exit(1)
	}
	if a.Mode == driver.Consumer {
		consume(ctx, a, cl)
	} else {
		produce(ctx, a, cl)
	}
}

func options(a driver.Args) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(a.Brokers()...), kgo.ClientID(a.App)}
	levels := map[string]kgo.LogLevel{
		"none": kgo.LogLevelNone, "error": kgo.LogLevelError, "warn": kgo.LogLevelWarn,
		"info": kgo.LogLevelInfo, "debug": kgo.LogLevelDebug,
	}
	level := kgo.LogLevelInfo
	if name, ok := a.Props["log.level"]; ok {
		l, known := levels[strings.ToLower(name)]
		if !known {
			driver.Fail(program, "--prop log.level="+name+": expected none|error|warn|info|debug")
		}
		level = l
	}
	stamp := func() string { return time.Now().UTC().Format("15:04:05.000 ") }
	opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stdout, level, stamp)))
	durations := map[string]func(time.Duration) kgo.Opt{
		"conn.idle.timeout": kgo.ConnIdleTimeout,
		"metadata.max.age":  kgo.MetadataMaxAge,
		"metadata.min.age":  kgo.MetadataMinAge,
	}
	for key, opt := range durations {
		if d, ok := a.Duration(program, key); ok {
			opts = append(opts, opt(d))
		}
	}
	if a.Mode == driver.Consumer {
		opts = append(opts,
			kgo.ConsumerGroup(a.Group),
			kgo.ConsumeTopics(a.Topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		)
		if d, ok := a.Duration(program, "session.timeout"); ok {
			opts = append(opts, kgo.SessionTimeout(d))
		}
		if d, ok := a.Duration(program, "heartbeat.interval"); ok {
			opts = append(opts, kgo.HeartbeatInterval(d))
		}
	} else {
		opts = append(opts, kgo.DefaultProduceTopic(a.Topic))
		if d, ok := a.Duration(program, "linger"); ok {
			opts = append(opts, kgo.ProducerLinger(d))
		}
	}
	return opts
}

func produce(ctx context.Context, a driver.Args, cl *kgo.Client) {
	driver.Status(a.App, "producer started")
	var acked, failed int64
	driver.EveryInterval(ctx, a.IntervalMs, func(n int64) {
		value := []byte("m-" + strconv.FormatInt(n, 10))
		sendCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := cl.ProduceSync(sendCtx, &kgo.Record{Key: value, Value: value}).FirstErr()
		cancel()
		if err != nil {
			failed++
			if failed%100 == 1 {
				driver.Status(a.App, "send failed: "+err.Error())
			}
		} else {
			acked++
		}
		if a.IntervalMs >= 1000 {
			driver.Status(a.App, fmt.Sprintf("sent m-%d acked=%d failed=%d", n, acked, failed))
		}
	})
	cl.Close()
	driver.Status(a.App, fmt.Sprintf("producer closed acked=%d failed=%d", acked, failed))
}

func consume(ctx context.Context, a driver.Args, cl *kgo.Client) {
	driver.Status(a.App, "consumer subscribed group="+a.Group)
	records := 0
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if ctx.Err() == nil {
				driver.Status(a.App, fmt.Sprintf("fetch %s[%d]: %v", topic, partition, err))
			}
		})
		records += fetches.NumRecords()
	}
	cl.Close() // commits what was consumed and leaves the group
	driver.Status(a.App, fmt.Sprintf("consumer closed records=%d", records))
}
