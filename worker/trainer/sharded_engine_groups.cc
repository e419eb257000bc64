// The process groups a ShardedEngine runs over (sharded_engine.h): a world of T x DP
// ranks, world rank = dp * T + tp, split into tensor-parallel groups of consecutive ranks
// and, per tensor-parallel rank, the strategy's shard and replica groups along the
// data-parallel dimension; and the strategies' names.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sharded_engine.h"
#include "util.h"

namespace llamafleet::trainer {

const char* ShardingStrategyName(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
  }
  return "?";
}

absl::StatusOr<ShardingStrategy> ParseShardingStrategy(const std::string& name) {
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                             ShardingStrategy::kHybridShard, ShardingStrategy::kNoShard}) {
    if (name == ShardingStrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown sharding strategy \"", name, "\" (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD)"));
}

std::vector<std::vector<int>> ShardGroups(int world_size, int group) {
  std::vector<std::vector<int>> out;
  for (int g = 0; g < world_size / group; ++g) {
    out.emplace_back();
    for (int i = 0; i < group; ++i) out.back().push_back(g * group + i);
  }
  return out;
}

std::vector<std::vector<int>> ReplicaGroups(int world_size, int group) {
  std::vector<std::vector<int>> out(group);
  for (int r = 0; r < world_size; ++r) out[r % group].push_back(r);
  return out;
}

absl::StatusOr<std::unique_ptr<ShardedEngine>> ShardedEngine::CreateWithContext(
    std::vector<UnitLayout> layout, const ShardingOptions& o, DistContext& ctx, const ShardSource& source,
    const ShardSource& frozen_source) {
  const int w = ctx.world_size();
  const int t = std::max(1, o.tensor_parallel);
  if (w % t != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallelism.tensor_parallel (", t, ") must divide the world size ", w));
  }
  const int dp = w / t;
  // Groups over data-parallel indices become, per tensor-parallel rank, groups of the
  // world ranks d * t + tp.
  auto expand = [t](const std::vector<std::vector<int>>& groups) {
    std::vector<std::vector<int>> out;
    for (const auto& g : groups) {
      for (int tp = 0; tp < t; ++tp) {
        out.emplace_back();
        for (int d : g) out.back().push_back(d * t + tp);
      }
    }
    return out;
  };
  std::vector<std::unique_ptr<Comm>> owned;
  auto group = [&](const std::vector<std::vector<int>>& dp_groups, const std::string& tag) -> absl::StatusOr<Comm*> {
    if (t == 1 && dp_groups.size() == 1) return &ctx.world();
    LF_ASSIGN_OR_RETURN(std::unique_ptr<Comm> c, ctx.NewGroup(expand(dp_groups), tag));
    owned.push_back(std::move(c));
    return owned.back().get();
  };
  Comm* tp_comm = nullptr;
  if (t > 1) {
    LF_ASSIGN_OR_RETURN(std::unique_ptr<Comm> c, ctx.NewGroup(ShardGroups(w, t), "tp"));
    tp_comm = c.get();
    owned.push_back(std::move(c));
  }
  Comm* shard = nullptr;
  Comm* replica = nullptr;
  std::vector<std::vector<int>> shard_groups;  // over data-parallel indices; empty: NO_SHARD
  switch (o.strategy) {
    case ShardingStrategy::kFullShard:
    case ShardingStrategy::kShardGradOp: {
      shard_groups = ShardGroups(dp, dp);
      LF_ASSIGN_OR_RETURN(shard, group(shard_groups, "dp"));
      break;
    }
    case ShardingStrategy::kNoShard: {
      owned.push_back(MakeLocalComm());
      shard = owned.back().get();
      LF_ASSIGN_OR_RETURN(replica, group(ShardGroups(dp, dp), "dp"));
      break;
    }
    case ShardingStrategy::kHybridShard: {
      const int g = o.hybrid_group_size > 0 ? o.hybrid_group_size : w;
      if (g > w || w % g != 0) {
        return absl::InvalidArgumentError(absl::StrCat("fsdp.hybrid_shard_group_size ", g,
                                                       " must divide the world size ", w));
      }
      if (g % t != 0) {
        return absl::InvalidArgumentError(absl::StrCat("parallelism.tensor_parallel (", t, ")",
                                                       " must divide HYBRID_SHARD's node group of ", g, " ranks"));
      }
      shard_groups = ShardGroups(dp, g / t);
      LF_ASSIGN_OR_RETURN(shard, group(shard_groups, "shard"));
      LF_ASSIGN_OR_RETURN(replica, group(ReplicaGroups(dp, g / t), "replica"));
      break;
    }
  }
  // NCCL runs a communicator's collectives in issue order on one stream: all-gathers get a
  // communicator of their own over the same ranks (see gather_comm()). Gloo shares one.
  Comm* gather = nullptr;
  if (ctx.world().backend() == "nccl" && shard != nullptr && shard->size() > 1) {
    LF_ASSIGN_OR_RETURN(std::unique_ptr<Comm> c, ctx.NewGroup(expand(shard_groups), "gather"));
    gather = c.get();
    owned.push_back(std::move(c));
  }
  LF_ASSIGN_OR_RETURN(std::unique_ptr<ShardedEngine> e, Create(std::move(layout), o, &ctx.world(), shard, replica,
                                                                ctx.rank(), w, source, frozen_source));
  e->gather_comm_ = gather;
  e->owned_comms_ = std::move(owned);
  e->tp_comm_ = tp_comm;
  if (tp_comm != nullptr) {
    // The replicated trainable elements this rank's shard holds, for the gradient norm.
    e->replicated_.resize(e->layout_.size());
    for (size_t u = 0; u < e->layout_.size(); ++u) {
      const ShardSpan& sp = e->spans_[u];
      for (const View& v : e->views_[u]) {
        if (v.frozen || v.split != TpSplit::kReplicated) continue;
        const int64_t lo = std::max(v.offset, sp.begin), hi = std::min(v.offset + v.numel, sp.begin + sp.shard);
        if (lo < hi) e->replicated_[u].emplace_back(lo - sp.begin, hi - lo);
      }
    }
  }
  return e;
}

}  // namespace llamafleet::trainer
