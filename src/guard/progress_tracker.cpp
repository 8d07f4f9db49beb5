// One global progress from the bars of a job's output (DESIGN §5, docs/run.md "Nested bars", issue 26):
// bar identity (description, total, unit, position; restarts at 0; copies from other processes), nesting
// by behaviour (an outer loop advances when an inner pass completes), side bars, epoch levels, and the
// invariants every update keeps (step <= total, no step back unless the nesting change is announced).
#include <algorithm>

#include "guard/guard.h"

namespace gm::guard {
namespace {

constexpr std::int64_t kMax = std::int64_t{1} << 50;  ///< beyond this a count is not combined
constexpr std::size_t kMaxOpen = 16;                  ///< open bars kept (more are ignored)
constexpr std::size_t kMaxLoopKeys = 64;

}  // namespace

bool ProgressTracker::matches(const Bar& b, const BarReading& r) {
  if (b.key != r.key || b.total != r.total) return false;
  if (!b.unit.empty() && !r.unit.empty() && b.unit != r.unit) return false;
  if (b.position == r.position) return true;
  // tqdm draws a finished bar kept with leave=True at position 0, whatever its position was.
  return r.position == 0 && r.n && (r.total ? *r.n == *r.total : *r.n >= b.n);
}

bool ProgressTracker::renamed(const Bar& b, const BarReading& r) {
  // The same bar with a new description (set_description): same place, total and unit, and it goes on.
  return b.position == r.position && b.total == r.total && r.n && *r.n >= b.n &&
         (b.unit.empty() || r.unit.empty() || b.unit == r.unit) &&
         !(r.elapsed_s && b.elapsed_s && *r.elapsed_s < *b.elapsed_s);
}

void ProgressTracker::learn(std::size_t depth, const Bar& b) {
  if (b.side || b.total || b.pass_max <= 0 || depth >= levels_.size() || !same_level(levels_[depth], b))
    return;
  auto& learned = levels_[depth].learned_total;
  if (learned && b.pass_max <= *learned) return;
  if (learned) changed_ = true;  // a longer pass than the first: the total grows
  learned = b.pass_max;
}

bool ProgressTracker::same_level(const Level& l, const Bar& b) {
  return l.key == b.key && l.total == b.total && (l.unit.empty() || b.unit.empty() || l.unit == b.unit);
}

bool ProgressTracker::restarts(const Bar& b, const BarReading& r) const {
  const std::int64_t n = *r.n;
  if (n >= b.n) return false;
  if (n == 0) return true;  // a new pass of a tqdm bar prints 0 first
  // With tqdm's elapsed time: it restarts with the pass; a copy printed by another process does not.
  if (r.elapsed_s && b.elapsed_s) return *r.elapsed_s < *b.elapsed_s && n <= b.n / 4;
  return n <= b.n / 10;  // Keras, rich: back to the start of the bar
}

void ProgressTracker::revise(std::size_t keep_levels) {
  if (levels_.size() > keep_levels) {
    levels_.resize(keep_levels);
    changed_ = true;
  }
}

void ProgressTracker::rename(std::size_t i, const std::string& key) {
  Bar& b = open_[i];
  if (i < levels_.size() && same_level(levels_[i], b)) levels_[i].key = key;
  for (auto& k : loop_keys_)
    if (k == b.key) k = key;
  b.key = key;
}

std::optional<ProgressUpdate> ProgressTracker::add(const BarReading& r, double now_s) {
  if (r.cleared) {
    for (std::size_t k = open_.size(); k-- > 0;) {
      if (open_[k].position != r.position) continue;
      cleared_ = open_[k];
      cleared_depth_ = k;
      cleared_parent_n_ = k > 0 ? open_[k - 1].n : 0;
      open_.resize(k);
      break;
    }
    return std::nullopt;
  }
  auto metrics_only = [&]() -> std::optional<ProgressUpdate> {
    if (r.metrics.empty()) return std::nullopt;
    ProgressUpdate u;
    u.metrics = r.metrics;
    return u;
  };
  if (!r.n) {
    if (r.epoch && r.epochs) {  // an "Epoch e/E" line: the outermost level; a new epoch closes the bars
      if (!epoch_base_) epoch_base_ = *r.epoch == 0 ? 0 : 1;
      const std::int64_t e = std::max<std::int64_t>(0, *r.epoch - *epoch_base_);
      // (A summary printed after its epoch's bar says no more than that bar did: the bars stay.)
      if (line_epoch_ && e != *line_epoch_ && !(bar_epoch_ && e <= *bar_epoch_)) {
        open_.clear();
        suspended_.reset();
      }
      if (epochs_ && *epochs_ != *r.epochs) changed_ = true;
      epochs_ = r.epochs;
      line_epoch_ = e;
      return global(r.metrics, now_s);
    }
    return metrics_only();
  }
  const std::int64_t n = *r.n;
  std::size_t i = open_.size();
  for (std::size_t k = 0; k < open_.size() && i == open_.size(); ++k)
    if (matches(open_[k], r) && open_[k].position == r.position) i = k;
  if (i < open_.size() && r.position == 0 && r.total && n == *r.total && open_[i].n == n) {
    // tqdm draws every closing bar at the cursor: a finished line that the bar at the cursor has already
    // shown belongs to a bar of the same loop still short of its end at another position (a second rank's).
    for (std::size_t k = 0; k < open_.size(); ++k)
      if (k != i && open_[k].position != 0 && open_[k].n < n && matches(open_[k], r)) {
        i = k;
        break;
      }
  }
  for (std::size_t k = 0; k < open_.size() && i == open_.size(); ++k)
    if (matches(open_[k], r)) i = k;
  for (std::size_t k = open_.size(); k-- > 0 && i == open_.size();)
    if (renamed(open_[k], r)) i = k;
  if (i < open_.size() && open_[i].key != r.key) rename(i, r.key);

  if (i == open_.size() && cleared_ && (matches(*cleared_, r) || renamed(*cleared_, r))) {
    // The bar erased last comes back: tqdm.write redrawing it (it goes on), or its loop's next pass.
    Bar c = std::move(*cleared_);
    cleared_.reset();
    const std::size_t d = std::min(cleared_depth_, open_.size());
    if (!restarts(c, r) && n >= c.n && d == cleared_depth_) {
      open_.resize(d);
      open_.push_back(std::move(c));
      i = d;
      if (open_[i].key != r.key) rename(i, r.key);
    } else if (d == cleared_depth_) {
      learn(d, c);
      if (d > 0 && !c.side && open_.size() == d && open_[d - 1].n == cleared_parent_n_)
        ++open_[d - 1].children_done;  // its outer bar has not printed since: count the pass
      else if (d == 0 && !c.side)
        ++top_passes_;
    }
  }

  if (i == open_.size()) {
    // An inner bar closed mid-pass when the bar around it advanced: if it now continues where it was, the
    // two were never nested (parallel bars, another process's bar); if it starts over, that was its end.
    bool parallel = false;
    std::size_t parent = 0;
    if (suspended_ && (matches(*suspended_, r) || renamed(*suspended_, r))) {
      parent = suspended_depth_ - 1;
      parallel = n > suspended_->n && !restarts(*suspended_, r) && parent < open_.size() &&
                 !(r.elapsed_s && suspended_->elapsed_s && *r.elapsed_s < *suspended_->elapsed_s);
      suspended_.reset();
    }
    if (cleared_ && cleared_depth_ >= open_.size()) cleared_.reset();  // another bar took its place
    if (parallel) {
      open_.resize(parent + 1);
      open_[parent].advanced_alone = true;
      revise(parent + 1);
    } else {
      while (!open_.empty() && open_.back().total && open_.back().n >= *open_.back().total) open_.pop_back();
    }
    if (open_.size() >= kMaxOpen) return metrics_only();
    Bar b;
    b.key = r.key;
    b.total = r.total;
    b.unit = r.unit;
    b.position = r.position;
    b.n = n;
    b.pass_max = n;
    b.elapsed_s = r.elapsed_s;
    b.epoch = r.epoch;
    b.epochs = r.epochs;
    b.first_s = now_s;
    Bar* up = open_.empty() ? nullptr : &open_.back();
    b.side = parallel || (up && (up->side || up->advanced_alone));
    const std::size_t depth = open_.size();
    if (!b.side && depth < levels_.size() && !same_level(levels_[depth], b)) {
      // Another bar where an established level was (a val bar after the train bar, a test bar after the
      // epochs): a side bar, unless it runs longer than that level ever did (a data-preparation bar before
      // training, Lightning's sanity check before the first epoch).
      b.side = true;
      b.contender = true;
    }
    if (up && !b.side) {
      up->inner_seen = true;
      if (std::find(loop_keys_.begin(), loop_keys_.end(), up->key) == loop_keys_.end() &&
          loop_keys_.size() < kMaxLoopKeys)
        loop_keys_.push_back(up->key);
    }
    open_.push_back(std::move(b));
    i = open_.size() - 1;
  } else {
    Bar& bar = open_[i];
    if (n < bar.n) {
      if (!restarts(bar, r)) return metrics_only();  // a lagging copy (another process): counted once
      // A new pass of the same loop.
      learn(i, bar);
      if (!bar.side) {
        if (i > 0)
          ++open_[i - 1].children_done;
        else
          ++top_passes_;
      }
      open_.resize(i + 1);
      bar.n = n;
      bar.pass_max = n;
      bar.children_done = 0;
      bar.inner_seen = false;
      bar.advanced_alone = false;
    } else if (n > bar.n) {
      if (suspended_ && suspended_depth_ > i) suspended_.reset();
      if (i + 1 < open_.size() && bar.children_done > 0 && !open_[i + 1].side) {
        // Its inner bar restarted before it redrew: this advance is that pass, the inner bar's new pass
        // goes on inside it.
      } else if (i + 1 < open_.size()) {
        const Bar& child = open_[i + 1];
        learn(i + 1, child);  // an outer loop advances when its inner pass is complete
        if (!child.side && (!child.total || child.n < *child.total)) {
          suspended_ = child;
          suspended_depth_ = i + 1;
        }
        open_.resize(i + 1);
      } else if (!bar.inner_seen && !bar.side) {
        // Advanced with no inner pass since its last advance: a leaf, whatever was nested in it before.
        bar.advanced_alone = true;
        if (i < levels_.size() && same_level(levels_[i], bar)) revise(i + 1);
      }
      bar.n = n;
      bar.pass_max = std::max(bar.pass_max, n);
      bar.children_done = 0;
      bar.inner_seen = false;
    }
    bar.elapsed_s = r.elapsed_s;
    bar.epoch = r.epoch;
    bar.epochs = r.epochs;
  }
  if (i > 0 && !open_[i].side) open_[i - 1].inner_seen = true;

  // A contender replaces the level it stands for once it has run longer than that level did.
  for (std::size_t d = 0; d < open_.size(); ++d) {
    Bar& b = open_[d];
    if (!b.contender || (d > 0 && open_[d - 1].side)) continue;
    if (d < levels_.size() && now_s - b.first_s > levels_[d].last_s - levels_[d].first_s) {
      b.side = false;
      b.contender = false;
      levels_.resize(d);
      changed_ = true;
      break;
    }
  }
  if (i >= open_.size() || open_[i].side) return metrics_only();
  return global(r.metrics, now_s);
}

std::optional<ProgressUpdate> ProgressTracker::global(std::map<std::string, double> metrics, double now_s) {
  // The step levels open now, outermost first; they extend or replace the nesting seen so far.
  std::size_t depth = 0;
  while (depth < open_.size() && !open_[depth].side) ++depth;
  std::size_t k = 0;
  while (k < depth && k < levels_.size() && same_level(levels_[k], open_[k])) ++k;
  if (k < depth && k < levels_.size()) revise(k);
  for (; levels_.size() < depth;) {
    const Bar& b = open_[levels_.size()];
    Level l;
    l.key = b.key;
    l.total = b.total;
    l.unit = b.unit;
    l.first_s = b.first_s;
    levels_.push_back(std::move(l));
    if (last_step_) changed_ = true;
  }
  for (std::size_t j = 0; j < depth; ++j) levels_[j].last_s = now_s;

  // The epoch level: "Epoch e/E" lines; else "Epoch e" in the outermost bar's description when that bar is
  // not itself the loop around the others (an outer bar whose description counts its own epochs); else the
  // passes of the outermost bar (a bar per epoch with nothing saying how many).
  const bool is_loop =
      depth > 0 && std::find(loop_keys_.begin(), loop_keys_.end(), open_[0].key) != loop_keys_.end();
  if (depth > 0 && open_[0].epoch && !is_loop) {
    if (!epoch_base_) epoch_base_ = (*open_[0].epoch == 0 || !open_[0].epochs) ? 0 : 1;
    const std::int64_t e = std::max<std::int64_t>(0, *open_[0].epoch - *epoch_base_);
    if (!bar_epoch_ && last_step_) changed_ = true;
    bar_epoch_ = e;
    if (open_[0].epochs) bar_epochs_ = open_[0].epochs;
  } else if (is_loop && bar_epoch_) {
    bar_epoch_.reset();
    changed_ = true;
  }
  std::optional<std::int64_t> epoch, epochs;
  std::string why;
  if (line_epoch_ && !(bar_epoch_ && *bar_epoch_ > *line_epoch_)) {
    epoch = line_epoch_;
    epochs = epochs_;
  } else if (bar_epoch_) {
    epoch = bar_epoch_;
    epochs = bar_epochs_;
    if (!epochs) why = "number of epochs unknown";
  } else if (top_passes_ > 0) {
    epoch = top_passes_;
    why = "the outer loop's length is unknown";
  }
  if (epoch && epochs && *epoch >= *epochs) {
    epochs.reset();  // "Epoch 3/3" counted from 0: the count is not what it seemed
    why = "number of epochs unclear";
  }

  std::int64_t step = epoch.value_or(0);
  std::optional<std::int64_t> total = epoch ? epochs : std::optional<std::int64_t>(1);
  bool step_known = true;
  for (std::size_t j = 0; j < levels_.size(); ++j) {
    const std::optional<std::int64_t> t = levels_[j].total ? levels_[j].total : levels_[j].learned_total;
    std::int64_t n = 0;
    if (j < depth) {
      n = std::min(open_[j].n, kMax) + std::min(open_[j].children_done, kMax);
      if (t) n = std::min(n, *t);
    }
    if (j > 0 || epoch) {
      if (!t || *t <= 0) {
        if (step != 0) {
          step_known = false;
          break;
        }
      } else if (step > kMax / *t) {
        step_known = false;
        break;
      } else {
        step *= *t;
      }
    }
    if (n > kMax - step) {
      step_known = false;
      break;
    }
    step += n;
    if (total) {
      if (!t || *t <= 0 || *total > kMax / *t)
        total.reset();
      else
        total = *total * *t;
    }
    if (!t && why.empty()) why = "total unknown";
  }
  ProgressUpdate u;
  u.metrics = std::move(metrics);
  if (levels_.empty() && !epoch) return u.metrics.empty() ? std::nullopt : std::optional<ProgressUpdate>(u);
  if (!step_known) {
    u.ambiguity = "steps per pass unknown until the inner loop completes once";
    return u;
  }
  if (total && *total <= 0) total.reset();
  if (total && step > *total) step = *total;
  if (last_total_ && total != last_total_) changed_ = true;  // a total learned is no change
  if (!changed_ && last_step_ && step < *last_step_) {
    if (total && *last_step_ > *total)
      changed_ = true;  // a total below the steps already seen: the unit changed, say so
    else
      step = *last_step_;  // never back unannounced
  }
  u.step = step;
  u.total_steps = total;
  if (!total) u.ambiguity = why.empty() ? "total unknown" : why;
  u.nesting_changed = changed_;
  changed_ = false;
  last_step_ = step;
  last_total_ = total;
  return u;
}

}  // namespace gm::guard
