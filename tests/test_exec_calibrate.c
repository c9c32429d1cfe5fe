// test_exec_calibrate.c — the calibration's fits and tables that need no GPU: the ring-step fit separates
// a step's fixed cost from its per-cell cost, the GPU's datasheet peaks come from its device name, and a
// links-only calibration (CPU backend) leaves the file uncalibrated and says so.
#include <stdlib.h>
#include <string.h>

#include "exec/calibrate.h"
#include "plan/cluster.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

TEST(calib_fit_ring_step_recovers_the_fixed_and_the_per_cell_cost_of_exact_points) {
  // extra = 12 us a step + 0.05 us a cell over the steps and cells of rings of 1 to 8 ranks; the totals
  // (the weights' scale) are the extras plus kernel time.
  double steps[6] = {1, 2, 4, 8, 4, 8}, cells[6] = {4096, 4096, 4096, 4096, 2048, 2560}, extra[6], total[6];
  for (int i = 0; i < 6; i++) extra[i] = steps[i] * 12e-6 + cells[i] * 0.05e-6, total[i] = extra[i] + 0.01;
  double a, b;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_ring_step(steps, cells, extra, total, 6, &a, &b, &e), SR_OK);
  CHECK_REL(a, 12.0, 1e-6);
  CHECK_REL(b, 0.05, 1e-6);
}

TEST(calib_fit_ring_step_refuses_measurements_that_cannot_separate_the_costs) {
  // cells proportional to steps: any split of the time between them fits.
  double steps[3] = {1, 2, 4}, cells[3] = {100, 200, 400}, extra[3] = {1e-5, 2e-5, 4e-5}, total[3] = {1, 1, 1}, a, b;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_ring_step(steps, cells, extra, total, 3, &a, &b, &e), SR_EINPUT);
  CHECK_EQ_INT(calib_fit_ring_step(steps, cells, extra, total, 1, &a, &b, &e), SR_EINPUT);
}

TEST(calib_gpu_peaks_come_from_the_datasheets_by_device_name) {
  double p, f;
  calib_gpu_peaks("NVIDIA H100 80GB HBM3", &p, &f);
  CHECK(p == 989 && f == 34);
  calib_gpu_peaks("NVIDIA H100 PCIe", &p, &f);
  CHECK(p == 756 && f == 26);
  calib_gpu_peaks("NVIDIA H200", &p, &f);
  CHECK(p == 989 && f == 34);
  calib_gpu_peaks("NVIDIA H800", &p, &f);
  CHECK(p == 989 && f == 1);
  calib_gpu_peaks("NVIDIA A100-SXM4-80GB", &p, &f);
  CHECK(p == 312 && f == 9.7);
  calib_gpu_peaks("Some Future GPU", &p, &f);
  CHECK(p == 0 && f == 0);
}

TEST(calibrate_on_the_cpu_backend_writes_links_and_leaves_the_efficiencies_uncalibrated) {
  char out[700], cmd[2000], *text = NULL;
  snprintf(out, sizeof out, "%s/cal.json", test_tmpdir());
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun -np 2 %s/sparsering-exec calibrate --backend cpu --cluster %s --reps 2 --out %s",
           test_bin_dir(), mpi_cpu_cluster(1, 2), out);
  CHECK_EQ_INT(test_run(cmd, &text), 0);
  free(text);
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load(out, &c, &e), SR_OK);
  CHECK_EQ_INT(c.calibrated, 0);
  CHECK(strstr(c.calibration, "links measured by sparsering-exec calibrate") != NULL);
}
