// Pipeline stages on other MPI ranks (Open MPI; docs/scale.md). Under `mpirun -np N`, every rank
// runs the same command line and loads the same model; rank 0 runs the verb and the last layers
// with the head, ranks 1..N-1 each run a range of layers (rank 1 with the embedding) as a
// PipelineStage of rank 0's Runner: the batch and the residual-stream rows go to the rank with
// point-to-point messages, the rows it computes come back (a star around rank 0: one exchange per
// remote stage per step, whatever the number of ranks).
//
// A rank that computes sends rank 0 a heartbeat every kBeatS, so rank 0 tells a rank that is
// slow from one that is gone: kLostS without a reply or a beat and the stage throws
// UnavailableError (the server answers 503 and shuts down) and MPI is left without
// MPI_Finalize, which would wait for the lost rank forever. Without MPI (a build without Open
// MPI, or a process not started by mpirun) the world is rank 0 of 1 and nothing here is used.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "edgeseek/internal/runtime/pipeline.h"

namespace es {

// Whether this build has MPI (Open MPI found at configure time).
bool MpiBuilt();
// Initializes MPI when mpirun started this process (OMPI_COMM_WORLD_SIZE or PMIX_RANK set);
// once, from main, before other threads. A worker rank (rank > 0) starts beating at once (it is
// busy loading its model). Returns the world size (1 otherwise).
int MpiInit(int* argc, char*** argv);
int MpiRank();  // 0 without MPI
int MpiSize();  // 1 without MPI
// Called (on the thread that found it) when rank 0 finds a rank lost, before the stage throws
// UnavailableError: the server asks itself to shut down there.
void SetMpiLostHandler(std::function<void()> f);

// A worker rank's life after loading `model` (null when its verb has none or its load failed:
// then every stage rank 0 asks for fails with `load_error`): runs the stages rank 0 asks for,
// each on a backend made by CreateBackend(backend, bo), until rank 0 says exit; then finalizes.
void RunMpiWorker(const std::shared_ptr<const Model>& model, const std::string& load_error,
                  const std::string& backend, const BackendOptions& bo);

// Rank 0: the stages on ranks 1..N-1 for one Runner, or none when the ranks already serve another
// runner of this process (the first runner made under mpirun is the split one; later ones, a
// draft model's, run on rank 0 alone). The ranks are free again when the stages are destroyed.
std::vector<std::unique_ptr<PipelineStage>> ClaimMpiStages();

// At exit. Rank 0: tells the workers to finish, then MPI_Finalize (skipped when a rank was lost).
// A worker that never entered RunMpiWorker (a command line that failed to parse): finalizes.
// Returns whether a rank was lost. A no-op without MPI or after RunMpiWorker.
bool MpiFinish();

}  // namespace es
