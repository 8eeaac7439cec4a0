// Command sarama-client runs one scenario workload with Sarama (github.com/IBM/sarama).
//
//	sarama-client --mode producer|idle-producer|consumer --app NAME --bootstrap B --topic T
//	              [--group G] [--interval-ms N] [--prop key=value]...
//
// producer / idle-producer: a SyncProducer sending one message every interval (default 200 ms
// / 30 s). consumer: a ConsumerGroup member reading the topic from the oldest offset. Sarama's
// own log (connections opened and closed, metadata refreshes) goes to stdout next to one status
// line per event. Runs until SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"connmon/goclients/internal/driver"
)

const program = "sarama-client"

var settings = map[string]string{
	"version":                     "Kafka protocol version Sarama assumes (default 4.3.1)",
	"metadata.refresh.frequency":  "Metadata.RefreshFrequency (default 10m)",
	"metadata.full":               "Metadata.Full: true|false (default true)",
	"net.keepalive":               "Net.KeepAlive, TCP keep-alive period (default 0: Go's 15 s)",
	"producer.retry.max":          "Producer.Retry.Max (default 3)",
	"consumer.session.timeout":    "Consumer.Group.Session.Timeout (default 10s)",
	"consumer.heartbeat.interval": "Consumer.Group.Heartbeat.Interval (default 3s)",
	"log":                         "Sarama's own log to stdout: true|false (default true)",
}

func main() {
	a := driver.Parse(program, settings)
	cfg := config(a)
	ctx, stop := driver.StopContext()
	defer stop()
	var err error
	if a.Mode == driver.Consumer {
		err = consume(ctx, a, cfg)
	} else {
		err = produce(ctx, a, cfg)
	}
	if err != nil {
		driver.Status(a.App, "failed: "+err.Error())
		os.Exit(1)
	}
}

func config(a driver.Args) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = a.App
	version := "4.3.1"
	if v, ok := a.Props["version"]; ok {
		version = v
	}
	v, err := sarama.ParseKafkaVersion(version)
	if err != nil {
		driver.Fail(program, "--prop version="+version+": "+err.Error())
	}
	cfg.Version = v
	if d, ok := a.Duration(program, "metadata.refresh.frequency"); ok {
		cfg.Metadata.RefreshFrequency = d
	}
	if full, ok := a.Props["metadata.full"]; ok {
		cfg.Metadata.Full = full == "true"
	}
	if d, ok := a.Duration(program, "net.keepalive"); ok {
		cfg.Net.KeepAlive = d
	}
	if n, ok := a.Int(program, "producer.retry.max"); ok {
		cfg.Producer.Retry.Max = n
	}
	if d, ok := a.Duration(program, "consumer.session.timeout"); ok {
		cfg.Consumer.Group.Session.Timeout = d
	}
	if d, ok := a.Duration(program, "consumer.heartbeat.interval"); ok {
		cfg.Consumer.Group.Heartbeat.Interval = d
	}
	if a.Props["log"] != "false" {
		sarama.Logger = log.New(os.Stdout, "[sarama] ", log.LstdFlags|log.Lmicroseconds|log.LUTC)
	}
	cfg.Producer.Return.Successes = true // a SyncProducer needs both
	cfg.Producer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return cfg
}

func produce(ctx context.Context, a driver.Args, cfg *sarama.Config) error {
	producer, err := sarama.NewSyncProducer(a.Brokers(), cfg)
	if err != nil {
		return fmt.Errorf("new producer: %w", err)
	}
	driver.Status(a.App, "producer started")
	var acked, failed int64
	driver.EveryInterval(ctx, a.IntervalMs, func(n int64) {
		value := sarama.StringEncoder("m-" + strconv.FormatInt(n, 10))
		msg := &sarama.ProducerMessage{Topic: a.Topic, Key: value, Value: value}
		if _, _, err := producer.SendMessage(msg); err != nil {
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
	err = producer.Close()
	driver.Status(a.App, fmt.Sprintf("producer closed acked=%d failed=%d", acked, failed))
	return err
}

type handler struct{ records *atomic.Int64 }

func (handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		s.MarkMessage(msg, "")
		h.records.Add(1)
	}
	return nil
}

func consume(ctx context.Context, a driver.Args, cfg *sarama.Config) error {
	group, err := sarama.NewConsumerGroup(a.Brokers(), a.Group, cfg)
	if err != nil {
		return fmt.Errorf("new consumer group: %w", err)
	}
	driver.Status(a.App, "consumer subscribed group="+a.Group)
	h := handler{records: &atomic.Int64{}}
	go func() {
		for err := range group.Errors() {
			driver.Status(a.App, "consumer error: "+err.Error())
		}
	}()
	for ctx.Err() == nil {
		// Consume returns at each rebalance; call it again to rejoin.
		if err := group.Consume(ctx, []string{a.Topic}, h); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				break
			}
			driver.Status(a.App, "consume: "+err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	err = group.Close()
	driver.Status(a.App, fmt.Sprintf("consumer closed records=%d", h.records.Load()))
	return err
}
