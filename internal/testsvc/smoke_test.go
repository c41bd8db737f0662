package testsvc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestRedisStandaloneSmoke(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: Redis(t)})
	defer c.Close()
	key := Unique("smoke")
	if err := c.Set(ctx(t), key, 41, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Incr(ctx(t), key).Result(); err != nil || n != 42 {
		t.Fatalf("INCR: got %d, %v; want 42", n, err)
	}
	// the scripting path the counters use: EVALSHA with NOSCRIPT fallback
	s := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	if n, err := s.Run(ctx(t), c, []string{key}, 8).Int64(); err != nil || n != 50 {
		t.Fatalf("script: got %d, %v; want 50", n, err)
	}
}

func TestRedisClusterSmoke(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: RedisCluster(t)})
	defer c.Close()
	if err := c.ForEachShard(ctx(t), func(ctx context.Context, s *redis.Client) error {
		return s.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	var shards atomic.Int32 // ForEachMaster calls concurrently
	c.ForEachMaster(ctx(t), func(context.Context, *redis.Client) error { shards.Add(1); return nil })
	if n := shards.Load(); n != 3 {
		t.Fatalf("cluster masters: got %d, want 3", n)
	}
	// keys with one hash tag live in one slot, so one script can touch both
	tag := Unique("{smoke")
	k1, k2 := tag+"}:a", tag+"}:b"
	s := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCRBY', KEYS[2], ARGV[1])`)
	if n, err := s.Run(ctx(t), c, []string{k1, k2}, 7).Int64(); err != nil || n != 7 {
		t.Fatalf("cross-key script in one slot: got %d, %v", n, err)
	}
}

func TestKafkaSmoke(t *testing.T) {
	broker := Kafka(t)
	topic := Unique("smoke")
	conn, err := kafka.DialContext(ctx(t), "tcp", broker)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: topic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	const n = 20
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", i%4)), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	// a just-created topic may not have leaders for a moment
	for attempt := 0; ; attempt++ {
		err = w.WriteMessages(ctx(t), msgs...)
		if err == nil || attempt == 50 || !errors.Is(err, kafka.LeaderNotAvailable) && !errors.Is(err, kafka.UnknownTopicOrPartition) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, GroupID: Unique("group"), Topic: topic,
		StartOffset: kafka.FirstOffset, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		m, err := r.FetchMessage(ctx(t))
		if err != nil {
			t.Fatalf("consume after %d messages: %v", len(seen), err)
		}
		seen[string(m.Value)] = true
		if err := r.CommitMessages(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClickHouseSmoke(t *testing.T) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ClickHouse(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := Unique("smoke")
	if err := conn.Exec(ctx(t), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP DATABASE "+db)
	if err := conn.Exec(ctx(t), "CREATE TABLE "+db+".usage (minute DateTime, key String, allowed UInt64) ENGINE = MergeTree() ORDER BY (key, minute)"); err != nil {
		t.Fatal(err)
	}
	// The 18.16 server needs the explicit column list for a batch insert.
	b, err := conn.PrepareBatch(ctx(t), "INSERT INTO "+db+".usage (minute, key, allowed)")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Minute)
	for i := range 10 {
		if err := b.Append(now, fmt.Sprintf("user_id=%d", i%3), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	var total uint64
	if err := conn.QueryRow(ctx(t), "SELECT sum(allowed) FROM "+db+".usage WHERE key != ?", "nobody").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 45 {
		t.Fatalf("sum(allowed): got %d, want 45", total)
	}
}

// TestPrivateKafkaOutage proves the outage broker works: produce, stop it
// (producing fails), start it again (producing works, data kept).
func TestPrivateKafkaOutage(t *testing.T) {
	p := StartPrivateKafka(t)
	topic := Unique("outage")
	produce := func(timeout time.Duration) error {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		w := &kafka.Writer{Addr: kafka.TCP(p.Addr), Topic: topic, AllowAutoTopicCreation: true, MaxAttempts: 3,
			RequiredAcks: kafka.RequireAll}
		defer w.Close()
		var err error
		for {
			if err = w.WriteMessages(c, kafka.Message{Value: []byte("x")}); err == nil || c.Err() != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond) // the auto-created topic's leader is being elected
		}
	}
	if err := produce(30 * time.Second); err != nil {
		t.Fatalf("produce before the outage: %v", err)
	}
	p.Stop(t)
	if err := produce(2 * time.Second); err == nil {
		t.Fatal("produce succeeded while the broker was stopped")
	}
	p.Start(t)
	if err := produce(60 * time.Second); err != nil {
		t.Fatalf("produce after the outage: %v", err)
	}
	conn, err := kafka.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil || len(parts) == 0 {
		t.Fatalf("topic lost across the restart: %v %v", parts, err)
	}
}
