// test_ncu_stalls_script.c — scripts/ncu_stalls.py (a profile's warp-state samples by reason, opcode and instruction)
// on a small Nsight Compute source export: the shares are the samples' shares, the top instruction is the spin's
// branch with its main reason, and --context shows the mbarrier wait before it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

TEST(ncu_stalls_shares_the_samples_by_reason_opcode_and_instruction) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "printf '%%s\\n' '\"Kernel Name\",\"k\",' "
           "'\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\",\"stall_long_sb\",\"stall_wait\",\"stall_long_sb (Not Issued)\"' "
           "'\"0x10\",\"SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x28818], R0\",\"5\",\"0\",\"5\",\"0\"' "
           "'\"0x20\",\"@!P0  BRA 0x90\",\"75\",\"75\",\"0\",\"9\"' "
           "'\"0x30\",\"HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ\",\"20\",\"0\",\"20\",\"0\"' "
           "| gzip > %s/s.csv.gz && python3 scripts/ncu_stalls.py %s/s.csv.gz --top 2 --context 1",
           test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "100 samples");
  CHECK_STR_CONTAINS(out, "stall_long_sb                 75.0%");  // the Not Issued column is not counted again
  CHECK_STR_CONTAINS(out, "stall_wait                    25.0%");
  CHECK_STR_CONTAINS(out, "BRA           75.0%");
  const char *top = out ? strstr(out, "top instructions:") : NULL;
  const char *wait = top ? strstr(top, "TRYWAIT P0, [UR4+0x28818]") : NULL;  // the context line before the spin
  CHECK(wait && strstr(wait, "75.0% 0x20 @!P0  BRA 0x90") && strstr(wait, "stall_long_sb"));
  free(out);
}
