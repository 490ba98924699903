#pragma once
// `mixtrain memory --timeline`: a step's trace drawn as SVG: live bytes event by event with the
// phase boundaries and the biggest buffers labelled, and the arena layout (each in-step buffer a
// box over its lifetime and its offset).
#include <string>
#include <vector>

#include "memory_predict.h"

namespace mixtrain::cli {

// The step's phases in order, as the timeline labels them: consecutive events of one phase, by
// event index counted from `first` (the step's first event), [begin, end). Labels: "forward",
// "backward", "optimizer" (unscale, clipping and the step), and "zero_grad" for optimizer work
// before anything was computed. A stretch that only frees buffers joins the one before it.
struct PhaseSegment {
  size_t begin = 0, end = 0;
  std::string label;
};
std::vector<PhaseSegment> phase_segments(const std::vector<memory::MemoryEvent>& events, size_t first);

std::string timeline_svg(const memory::MemoryTrace& trace, const ArenaLayout& arena, const std::string& title);
// Throws a UsageError naming --timeline when `path` cannot be written (checked before the work).
void check_timeline_path(const std::string& path);
// Written beside and renamed, so a failed write never leaves half a picture.
void write_timeline(const std::string& path, const memory::MemoryTrace& trace, const ArenaLayout& arena,
                    const std::string& title);

}  // namespace mixtrain::cli
