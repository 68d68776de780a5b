// Hierarchical allreduce (as Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE, and
// the two-level schemes of BlueConnect / 2D-torus allreduce): the slow link
// between groups carries each value about once per group instead of once per
// rank pair that straddles it.
//   1. ring reduce-scatter inside the group: rank i of the group holds the
//      group's sum of slice i (1/g of the vector);
//   2. allreduce of that slice across groups among the ranks holding the same
//      slice (one per group), by any algorithm: every rank uses its own link;
//   3. ring allgather inside the group.
// Every rank ends with the owner's bits of every slice, so results are
// identical on all ranks. Groups must all have g ranks, numbered alike.
#pragma once

#include <cstdint>

#include "allreduce.h"
#include "communicator.h"
#include "segmented_exchange.h"

namespace mxkv {

// The stages apart, for a pipeline of many vectors (TensorCollectives): one vector's
// group stages may run on another thread while another vector crosses the groups.
// 1: after it this rank's slice holds its group's sum.
void hierarchical_reduce_scatter(const Communicator& local, Workspace& ws, void* data,
                                 int64_t count, int dtype, int compress);
// 2: the slice allreduced across groups, times scale (as it will travel in 3).
void hierarchical_across(const Communicator& local, const Communicator& cross, Workspace& ws,
                         void* data, int64_t count, int dtype, Algorithm cross_algorithm,
                         int compress, double scale);
// 3: every rank of the group gets every slice.
void hierarchical_allgather(const Communicator& local, Workspace& ws, void* data, int64_t count,
                            int dtype, int compress);

// data[i] = scale * sum over every rank of every group of data[i]; `local`: this
// rank's group, `cross`: the ranks of every group with this rank's index in its group.
void allreduce_hierarchical(const Communicator& local, const Communicator& cross, Workspace& ws,
                            void* data, int64_t count, int dtype, Algorithm cross_algorithm,
                            int compress, double scale);

}  // namespace mxkv
