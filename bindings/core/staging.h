// staging.h: runs a CUDA entry point on host arrays by copying through device buffers that each thread
// reuses (grown, never shrunk). Used when the JS API is asked for device 'cuda' with host TypedArrays.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "maporl.h"

namespace maporl_js {

struct StagedArg {
    void * host;  // host memory (inputs are only read)
    size_t bytes;
    bool input;   // copied host -> device before the call
    bool output;  // copied device -> host after the call
};

// Calls fn with one device pointer per arg, in order. Returns the first non-OK status.
maporl_status RunStaged(const std::vector<StagedArg> & args,
                        const std::function<maporl_status(const std::vector<void *> &)> & fn);

// One array argument of RunOn: host memory or null (an optional array that was not given).
struct ArrayArg {
    void * host;
    size_t bytes;
    bool input, output;
};

// Calls fn with one pointer per arg: the host pointers on the CPU, device copies (RunStaged) on CUDA. Null args
// stay null on both.
maporl_status RunOn(maporl_device device, const std::vector<ArrayArg> & args,
                    const std::function<maporl_status(const std::vector<void *> &)> & fn);

}  // namespace maporl_js
