// The end-to-end check the test plugins share: train a config for a few steps through the
// real loader and trainer, then read back what the run logged.
#ifndef VISION_MODELS_TESTING_TRAIN_FOR_TEST_H_
#define VISION_MODELS_TESTING_TRAIN_FOR_TEST_H_

#include <string>
#include <vector>

namespace vision::models::testing {

// Trains `config_path` in one process with its output under TEST_TMPDIR/run, expecting
// `steps` steps and their last checkpoint (test failures otherwise), and returns the value of
// loss term `loss` from each line of metrics.jsonl that has it.
std::vector<double> TrainAndReadLoss(const std::string& config_path, int steps,
                                     const std::string& loss);

}  // namespace vision::models::testing

#endif  // VISION_MODELS_TESTING_TRAIN_FOR_TEST_H_
