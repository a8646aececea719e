// Command parley-go is the worked example of a Parley client outside TypeScript: it connects
// with a creds file, optionally sends one message to a room, and optionally consumes its inbox,
// answering every message from someone else with "echo: <text>" in the same trace. It prints one
// JSON object per line for each thing it did.
//
//	parley-go -servers nats://127.0.0.1:4222 -creds agent.creds -room room_… -send "hello" \
//	  -traceparent 00-<trace>-<span>-01 -echo 10
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"parley.dev/go/parley"
)

func emit(v map[string]interface{}) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func main() {
	servers := flag.String("servers", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	creds := flag.String("creds", "", "the participant's creds file")
	room := flag.String("room", "", "room to send to")
	send := flag.String("send", "", "text to send to -room")
	traceparent := flag.String("traceparent", "", "W3C traceparent of the send")
	echo := flag.Int("echo", 0, "consume the inbox and echo this many messages from others, then exit")
	timeout := flag.Duration("timeout", 60*time.Second, "give up consuming after this long")
	flag.Parse()
	if *creds == "" {
		fmt.Fprintln(os.Stderr, "parley-go: -creds is required")
		os.Exit(2)
	}
	c, err := parley.Connect(*servers, *creds)
	if err != nil {
		emit(map[string]interface{}{"event": "error", "stage": "connect", "message": err.Error()})
		os.Exit(1)
	}
	defer c.Close()
	if err := c.Presence("online", "parley-go"); err != nil {
		emit(map[string]interface{}{"event": "error", "stage": "presence", "message": err.Error()})
		os.Exit(1)
	}
	defer c.Presence("offline", "")
	// Heartbeats every 10 s: the registry turns a silent participant offline after its TTL (30 s).
	beat := time.NewTicker(10 * time.Second)
	defer beat.Stop()
	go func() {
		for range beat.C {
			_ = c.Presence("online", "parley-go")
		}
	}()
	emit(map[string]interface{}{"event": "connected", "id": c.ID})
	if *send != "" {
		r, err := c.Send(*room, []parley.Part{{Type: "text", Text: *send}}, parley.SendOptions{Traceparent: *traceparent})
		if err != nil {
			emit(map[string]interface{}{"event": "error", "stage": "send", "code": parley.CodeOf(err), "message": err.Error()})
			os.Exit(1)
		}
		emit(map[string]interface{}{"event": "sent", "id": r.ID, "roomSeq": r.RoomSeq})
	}
	if *echo <= 0 {
		return
	}
	stop := make(chan struct{})
	done := 0
	timer := time.AfterFunc(*timeout, func() { close(stop) })
	err = c.Consume(stop, func(d *parley.Delivery) error {
		if d.Message.Kind != "message" || d.Message.Sender.ID == c.ID {
			return nil
		}
		emit(map[string]interface{}{
			"event": "received", "id": d.Message.ID, "room": d.Room, "roomSeq": d.RoomSeq,
			"text": d.Message.Text(), "traceparent": d.Traceparent, "redelivered": d.Redelivered,
			"streamSeq": d.StreamSeq,
		})
		r, err := c.Reply(d, "echo: "+d.Message.Text(), parley.SendOptions{ClientMsgID: "echo-" + d.Message.ID[4:]})
		if err != nil {
			return err
		}
		emit(map[string]interface{}{"event": "sent", "id": r.ID, "roomSeq": r.RoomSeq, "replyTo": d.Message.ID})
		done++
		if done == *echo {
			timer.Stop()
			close(stop)
		}
		return nil
	})
	if err != nil {
		emit(map[string]interface{}{"event": "error", "stage": "consume", "message": err.Error()})
		os.Exit(1)
	}
	emit(map[string]interface{}{"event": "done", "handled": done})
	if done < *echo {
		os.Exit(3)
	}
}
