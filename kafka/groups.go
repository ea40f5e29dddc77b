package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupMember is one member of a consumer group as the coordinator describes it.
type GroupMember struct {
	// ID is the member id the coordinator gave it.
	ID string `json:"id"`
	// ClientID is the client id the member connected with; Host the address it connected from.
	ClientID string `json:"client_id"`
	Host     string `json:"host"`
	// Partitions are the partitions assigned to it, per logical topic.
	Partitions map[string][]int `json:"partitions,omitempty"`
}

func (m GroupMember) String() string {
	return m.ID + " (client " + m.ClientID + " from " + m.Host + ")"
}

// GroupDescription is a consumer group's state and members.
type GroupDescription struct {
	// Group is the logical group id (namespace removed).
	Group string `json:"group"`
	// State is the coordinator's word for it: Stable, PreparingRebalance, CompletingRebalance, Empty or Dead.
	State string `json:"state"`
	// Members of the current generation, by member id.
	Members []GroupMember `json:"members"`
}

// MemberList names the members, comma-separated, for messages.
func (g GroupDescription) MemberList() string {
	names := make([]string, len(g.Members))
	for i, m := range g.Members {
		names[i] = m.String()
	}
	return strings.Join(names, ", ")
}

// DescribeGroup returns the state and members of a consumer group (namespaced like ConsumerConfig.Group). A
// group the cluster does not know is described as Dead with no members, as Kafka itself does.
func (a *Admin) DescribeGroup(ctx context.Context, group string) (GroupDescription, error) {
	id := a.cfg.Topic(group)
	cl, err := a.cl.franzAdmin(ctx)
	if err != nil {
		return GroupDescription{}, fmt.Errorf("kafka: describe group %s: %w", id, err)
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{id}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return GroupDescription{}, fmt.Errorf("kafka: describe group %s: %w", id, a.cl.explain(ctx, err))
	}
	out := GroupDescription{Group: group, State: "Dead"}
	for _, g := range resp.Groups {
		if g.Group != id {
			continue
		}
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return out, fmt.Errorf("kafka: describe group %s: %w", id, err)
		}
		if g.State != "" {
			out.State = g.State
		}
		for _, m := range g.Members {
			gm := GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: strings.TrimPrefix(m.ClientHost, "/")}
			// A consumer group's assignment is the consumer protocol's; any other protocol's is not decoded.
			var as kmsg.ConsumerMemberAssignment
			if g.ProtocolType == "consumer" && len(m.MemberAssignment) > 0 {
				if err := as.ReadFrom(m.MemberAssignment); err != nil {
					return out, fmt.Errorf("kafka: describe group %s: assignment of member %s: %w", id, m.MemberID, err)
				}
			}
			for _, t := range as.Topics {
				if gm.Partitions == nil {
					gm.Partitions = map[string][]int{}
				}
				parts := make([]int, len(t.Partitions))
				for i, p := range t.Partitions {
					parts[i] = int(p)
				}
				slices.Sort(parts)
				gm.Partitions[a.cfg.logical(t.Topic)] = parts
			}
			out.Members = append(out.Members, gm)
		}
	}
	slices.SortFunc(out.Members, func(a, b GroupMember) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// logical strips the namespace from a physical topic or group name.
func (c Config) logical(physical string) string {
	if c.Namespace == "" {
		return physical
	}
	return strings.TrimPrefix(physical, c.Namespace+".")
}
