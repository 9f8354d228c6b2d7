#include <lockstep/lockstep.hpp>

#include <cstdio>

int main() {
  lockstep::Sequential model({lockstep::layers::Dense(4, "relu", 3), lockstep::layers::Dense(2, "softmax")});
  std::printf("consumer: %lld params\n", static_cast<long long>(model.count_params()));
  return model.count_params() == 3 * 4 + 4 + 4 * 2 + 2 ? 0 : 1;
}
