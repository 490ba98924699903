// CPU training does not depend on the thread governor (docs/CPU.md, "Threads under load"): a UNet
// whose convolutions are large enough for the GEMMs to be cut into blocks gives the same losses,
// bit for bit, on all threads, on one thread throughout (a cool-down) and with cool-downs
// starting and ending every millisecond in the middle of its steps.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backends/cpu/threads.h"
#include "unet/unet_trainer.h"

namespace mt = mixtrain;
namespace ex = mixtrain::examples;
namespace tr = mixtrain::train;
namespace cpu = mixtrain::backends::cpu;

namespace {

std::vector<double> unet_losses(tr::Precision p) {
  ex::UnetConfig c;
  c.synthetic = true;
  c.width = 16;  // im2col GEMMs of 16-128 rows, 1024-pixel columns and depths up to 1152
  c.image_size = 32;
  c.batch_size = 4;
  c.steps = 4;
  c.seed = 5;
  c.precision = p;
  c.device = mt::Device::cpu();
  return ex::run_unet(c).losses;
}

// Flips the governor between all threads and one every 700 us until destroyed.
class CooldownFlipper {
 public:
  explicit CooldownFlipper(cpu::ThreadGovernor& g)
      : thread_([this, &g] {
          for (bool serial = true; !stop_.load(); serial = !serial) {
            g.hold_serial(serial ? cpu::now_ns() + int64_t{3'600'000'000'000} : 0);
            std::this_thread::sleep_for(std::chrono::microseconds(700));
          }
          g.hold_serial(0);
        }) {}
  ~CooldownFlipper() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(CpuDeterminism, UnetLossesDoNotDependOnTheGovernor) {
  cpu::ThreadGovernor& g = cpu::governor();
  if (!g.adaptive())
    GTEST_SKIP() << "the thread count is fixed at " << g.full()
                 << " here (OMP_NUM_THREADS, MIXTRAIN_CPU_ADAPTIVE=0 or one CPU): the governor never switches";
  for (tr::Precision p : {tr::Precision::Fp32, tr::Precision::Bf16}) {
    const std::vector<double> threaded = unet_losses(p);
    g.hold_serial(cpu::now_ns() + int64_t{3'600'000'000'000});
    const std::vector<double> serial = unet_losses(p);
    g.hold_serial(0);
    std::vector<double> flipped;
    {
      CooldownFlipper flipper(g);
      flipped = unet_losses(p);
    }
    ASSERT_EQ(serial.size(), threaded.size());
    ASSERT_EQ(flipped.size(), threaded.size());
    for (size_t i = 0; i < threaded.size(); ++i) {
      EXPECT_EQ(serial[i], threaded[i]) << tr::precision_name(p) << " step " << i << ": one thread throughout";
      EXPECT_EQ(flipped[i], threaded[i]) << tr::precision_name(p) << " step " << i << ": cool-downs mid-step";
    }
  }
}

}  // namespace
