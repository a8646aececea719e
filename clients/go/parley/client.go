// Package parley is a small Parley client in Go, written from the AsyncAPI contract
// (docs/protocol/asyncapi.yaml): it connects with a creds file, sends to rooms through the
// ingress (request/reply on the participant's own parley.in.<id>.send), consumes the participant's
// inbox in order and acknowledges each delivery after it was handled, and carries W3C trace
// context (traceparent) from a delivery into the messages sent while handling it.
//
// It builds with Debian's golang-go (1.19) and golang-github-nats-io-go-nats-dev (nats.go 1.22) in
// GOPATH mode; it has no other dependencies.
package parley

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Part is one part of a message: text, data (a JSON object) or a file reference.
type Part struct {
	Type      string                 `json:"type"`
	Text      string                 `json:"text,omitempty"`
	Data      map[string]interface{} `json:"data,omitempty"`
	MediaType string                 `json:"mediaType,omitempty"`
}

// SendRequest is the body of parley.in.<id>.send (schema SendRequest).
type SendRequest struct {
	ClientMsgID string   `json:"clientMsgId"`
	Room        string   `json:"room"`
	Kind        string   `json:"kind"`
	Parts       []Part   `json:"parts"`
	Mentions    []string `json:"mentions"`
	Hop         int      `json:"hop"`
	ReplyTo     string   `json:"replyTo,omitempty"`
	CausedBy    string   `json:"causedBy,omitempty"`
}

// SendReply is the ingress's answer once JetStream stored the message.
type SendReply struct {
	ID        string `json:"id"`
	RoomSeq   int    `json:"roomSeq"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// Sender is who sent a message, as the ingress stamped it.
type Sender struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
}

// TraceContext is the trace copied into a stored message.
type TraceContext struct {
	Traceparent string `json:"traceparent"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// RoomMessage is a stored message as it arrives in an inbox (schema RoomMessage; the fields this
// client uses).
type RoomMessage struct {
	ID       string        `json:"id"`
	Room     string        `json:"room"`
	Kind     string        `json:"kind"`
	Sender   Sender        `json:"sender"`
	Parts    []Part        `json:"parts"`
	Mentions []string      `json:"mentions"`
	Hop      int           `json:"hop"`
	CausedBy string        `json:"causedBy,omitempty"`
	Trace    *TraceContext `json:"trace,omitempty"`
	SentAt   string        `json:"sentAt"`
}

// Text is the message's text parts, joined.
func (m *RoomMessage) Text() string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Error is a refusal from a Parley service: the code from the Parley-Error header and the message
// of the ErrorEnvelope body.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// CodeOf returns the Parley error code of err, or "" when it is not a refusal.
func CodeOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Client is a connected participant.
type Client struct {
	ID string
	NC *nats.Conn
	js nats.JetStreamContext

	mu       sync.Mutex
	lastSeen map[string]int // room -> last room position handled (duplicates are acked, not handled)
}

var jwtRe = regexp.MustCompile(`-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END NATS USER JWT------`)

// IdentityOf reads the participant id (the NATS user's name) from a creds file.
func IdentityOf(credsPath string) (string, error) {
	raw, err := os.ReadFile(credsPath)
	if err != nil {
		return "", err
	}
	m := jwtRe.FindSubmatch(raw)
	if m == nil {
		return "", errors.New("not a NATS creds file (no user JWT inside)")
	}
	parts := strings.Split(string(m[1]), ".")
	if len(parts) != 3 {
		return "", errors.New("the user JWT is malformed")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", err
	}
	var claims struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Name == "" {
		return "", errors.New("the creds file names no participant")
	}
	return claims.Name, nil
}

// Connect connects as the participant in the creds file. Replies come under _INBOX.<id>., the
// only reply prefix its permissions allow.
func Connect(servers, credsPath string) (*Client, error) {
	id, err := IdentityOf(credsPath)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(servers,
		nats.UserCredentials(credsPath),
		nats.CustomInboxPrefix("_INBOX."+id),
		nats.Name("parley-go:"+id),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	js, err := nc.JetStream()
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Client{ID: id, NC: nc, js: js, lastSeen: map[string]int{}}, nil
}

// Close drains the connection.
func (c *Client) Close() error { return c.NC.Drain() }

// Presence publishes a heartbeat on parley.in.<id>.presence (schema PresenceHeartbeat): state is
// online, busy, needs_input or offline; activity a short line. The registry turns a participant
// offline by itself when heartbeats stop for its TTL, so a long-running client repeats it (the
// TypeScript SDK does every 10 s).
func (c *Client) Presence(state, activity string) error {
	body, err := json.Marshal(struct {
		State    string `json:"state"`
		Activity string `json:"activity,omitempty"`
	}{state, activity})
	if err != nil {
		return err
	}
	if err := c.NC.Publish("parley.in."+c.ID+".presence", body); err != nil {
		return err
	}
	return c.NC.Flush()
}

// NewClientMsgID is a random id for a send (retries reuse it, so the message is stored once).
func NewClientMsgID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SendOptions are the optional fields of a send.
type SendOptions struct {
	Mentions    []string
	ReplyTo     string
	CausedBy    string
	Hop         int
	Kind        string
	ClientMsgID string
	// Traceparent (W3C) to send in the request headers.
	Traceparent string
	// How long to keep retrying an unanswered request. Default 30 s.
	Deadline time.Duration
}

// Send appends parts to a room through the ingress. Timeouts are retried with the same client
// message id until the deadline; a refusal is returned as *Error.
func (c *Client) Send(room string, parts []Part, o SendOptions) (*SendReply, error) {
	req := SendRequest{
		ClientMsgID: o.ClientMsgID,
		Room:        room,
		Kind:        o.Kind,
		Parts:       parts,
		Mentions:    o.Mentions,
		Hop:         o.Hop,
		ReplyTo:     o.ReplyTo,
		CausedBy:    o.CausedBy,
	}
	if req.ClientMsgID == "" {
		req.ClientMsgID = NewClientMsgID()
	}
	if req.Kind == "" {
		req.Kind = "message"
	}
	if req.Mentions == nil {
		req.Mentions = []string{}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	deadline := o.Deadline
	if deadline == 0 {
		deadline = 30 * time.Second
	}
	until := time.Now().Add(deadline)
	for {
		msg := nats.NewMsg("parley.in." + c.ID + ".send")
		msg.Data = body
		if o.Traceparent != "" {
			msg.Header.Set("traceparent", o.Traceparent)
		}
		resp, err := c.NC.RequestMsg(msg, 5*time.Second)
		if err == nil {
			return decodeReply(resp)
		}
		if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) || time.Now().After(until) {
			return nil, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func decodeReply(resp *nats.Msg) (*SendReply, error) {
	if code := resp.Header.Get("Parley-Error"); code != "" {
		var env struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(resp.Data, &env)
		return nil, &Error{Code: code, Message: env.Error.Message}
	}
	var r SendReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("unexpected send reply: %w", err)
	}
	return &r, nil
}

// Delivery is one inbox entry being handled.
type Delivery struct {
	Message     RoomMessage
	Room        string
	RoomSeq     int
	Traceparent string
	// Redelivered is true when JetStream delivered it before (the handler may already have run).
	Redelivered bool
	// StreamSeq is its position in the inbox stream.
	StreamSeq uint64
}

// ChildTraceparent returns a traceparent in the same trace as parent, with a new span id, so
// messages sent while handling a delivery continue its trace. "" when parent is not valid.
func ChildTraceparent(parent string) string {
	p := strings.Split(parent, "-")
	if len(p) != 4 || len(p[1]) != 32 || len(p[2]) != 16 {
		return ""
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return p[0] + "-" + p[1] + "-" + hex.EncodeToString(b) + "-" + p[3]
}

// Reply sends text to the delivery's room as an answer: replyTo and causedBy set, hop + 1, and
// the delivery's trace continued.
func (c *Client) Reply(d *Delivery, text string, o SendOptions) (*SendReply, error) {
	o.ReplyTo = d.Message.ID
	o.CausedBy = d.Message.ID
	o.Hop = d.Message.Hop + 1
	if o.Traceparent == "" {
		o.Traceparent = ChildTraceparent(d.Traceparent)
	}
	return c.Send(d.Room, []Part{{Type: "text", Text: text}}, o)
}

// InboxShards is how many inbox streams there are (PARLEY_INBOX_0 … PARLEY_INBOX_15).
const InboxShards = 16

// InboxShard is the inbox shard of a participant: FNV-1a (32 bit) of its id, modulo InboxShards,
// the same as the contracts' inboxShardOf.
func InboxShard(participantID string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(participantID))
	return h.Sum32() % InboxShards
}

// Consume handles inbox deliveries one at a time, in inbox order, until stop is closed. Each is
// acknowledged after handler returned nil. A handler error naks the delivery and ends Consume with
// that error, so nothing behind it is handled first; consuming again gets it back, in order. An
// entry at or below the last handled position of its room (a redelivery of something already
// handled) is acknowledged without running the handler.
func (c *Client) Consume(stop <-chan struct{}, handler func(*Delivery) error) error {
	shard := InboxShard(c.ID)
	stream, consumer := fmt.Sprintf("PARLEY_INBOX_%d", shard), c.ID
	filter := fmt.Sprintf("parley.inbox.%d.%s.*", shard, c.ID)
	ch := make(chan *nats.Msg, 256)
	var next func() (*nats.Msg, error)
	sub, err := c.js.PullSubscribe(filter, "", nats.Bind(stream, consumer))
	if errors.Is(err, nats.ErrPullSubscribeToPushConsumer) {
		// A push consumer (deliver subject under _INBOX.<id>.): nats.go follows its flow control.
		sub, err = c.js.ChanSubscribe(filter, ch, nats.Bind(stream, consumer), nats.ManualAck())
		if err != nil {
			return err
		}
		next = func() (*nats.Msg, error) {
			select {
			case m := <-ch:
				return m, nil
			case <-time.After(time.Second):
				return nil, nats.ErrTimeout
			}
		}
	} else if err != nil {
		return err
	} else {
		var buffered []*nats.Msg
		// Fetched but not handled when Consume returns: nak'ed, so they come back at once, in order.
		defer func() {
			for _, m := range buffered {
				_ = m.Nak()
			}
		}()
		next = func() (*nats.Msg, error) {
			if len(buffered) == 0 {
				msgs, err := sub.Fetch(64, nats.MaxWait(time.Second))
				if err != nil {
					return nil, err
				}
				buffered = msgs
			}
			m := buffered[0]
			buffered = buffered[1:]
			return m, nil
		}
	}
	defer sub.Unsubscribe()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		m, err := next()
		if errors.Is(err, nats.ErrTimeout) {
			continue
		}
		if err != nil {
			select {
			case <-stop:
				return nil
			default:
			}
			return err
		}
		if err := c.handle(m, handler); err != nil {
			return err
		}
	}
}

func (c *Client) handle(m *nats.Msg, handler func(*Delivery) error) error {
	var msg RoomMessage
	if err := json.Unmarshal(m.Data, &msg); err != nil {
		// Not a room message: nothing will make it one; acknowledge so the inbox moves on.
		return m.Ack()
	}
	seq, _ := strconv.Atoi(m.Header.Get("Parley-Room-Seq"))
	meta, _ := m.Metadata()
	d := &Delivery{
		Message:     msg,
		Room:        msg.Room,
		RoomSeq:     seq,
		Traceparent: m.Header.Get("traceparent"),
		Redelivered: meta != nil && meta.NumDelivered > 1,
	}
	if meta != nil {
		d.StreamSeq = meta.Sequence.Stream
	}
	c.mu.Lock()
	seen := seq > 0 && seq <= c.lastSeen[msg.Room]
	c.mu.Unlock()
	if seen {
		return m.Ack()
	}
	if err := handler(d); err != nil {
		_ = m.Nak()
		return fmt.Errorf("handler failed on %s: %w", msg.ID, err)
	}
	c.mu.Lock()
	if seq > c.lastSeen[msg.Room] {
		c.lastSeen[msg.Room] = seq
	}
	c.mu.Unlock()
	return m.AckSync()
}
