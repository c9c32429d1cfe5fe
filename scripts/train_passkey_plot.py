#!/usr/bin/env python3
# passkey loss curves of the GPU calls (results/train/2026-11-22-h200-cNN-*/*.csv) into results/train/passkey-h200.png:
# the short-sequence recipes, the first 32K fine-tune, the packed curriculum (call c4), PoSE (call c7) and the
# PoSE curriculum with a 4K stage and batched 32K steps (calls c8-c10), and the online estimate with a forced
# local window (calls c12-c16: the goal met in c14 and c16, dense and MTraining side by side)
# (scripts/gpu/train_one.sh passkey; settings and results in results/JOURNAL.md and the calls' READMEs)
import csv, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import glob
def load(name):  # "cN-RUN": RUN.csv of call N's folder
    call, run = name.split("-", 1)
    folder, = glob.glob(f"results/train/2026-11-22-h200-c{int(call[1:]):02d}-*/")
    with open(f"{folder}{run}.csv") as f:
        r = list(csv.DictReader(f))
    return [int(x["step"]) for x in r], [float(x["loss"]) for x in r]
fig, axs = plt.subplots(4, 2, figsize=(13, 16))
ax = axs.flatten()
for n, lbl in [("c1-pk-answer-b1", "256 tok, answer loss, batch 1, lr 1e-3"), ("c1-pk32-a-256", "256 tok, keys loss, batch 8, lr 1e-3"),
               ("c2-pkA-keys-1e3", "512 tok, keys loss, batch 8, lr 1e-3 (killed at 916)"), ("c2-pkA-keys-2e3", "512 tok, keys loss, batch 8, lr 2e-3"),
               ("c2-pkA-mix-1e3", "512 tok, mix loss, batch 8, lr 1e-3")]:
    s, l = load(n)
    ax[0].plot(s, l, label=lbl, lw=0.8)
ax[0].axhline(2.3026, color="gray", ls=":", lw=0.8)
ax[0].set_xlabel("step"); ax[0].set_ylabel("loss (nats per scored byte)"); ax[0].set_title("passkey, tiny-25m, short sequences (H200)")
ax[0].legend(fontsize=7)
for n, lbl in [("c1-pk32-c-dense-ring", "32K dense"), ("c1-pk32-c-mtraining", "32K MTraining vs-topp:0.95")]:
    s, l = load(n)
    ax[1].plot(s, l, label=lbl, lw=0.8)
ax[1].set_xlabel("step"); ax[1].set_title("32K fine-tune from the 256 -> 2K curriculum (keys loss)")
ax[1].legend(fontsize=7)
# the packed curriculum of call c4, stages laid end to end (512 x 64, 4K x 8, 16K x 2, then 32K)
off = 0
for n, lbl in [("c4-pkA-512x64", "512 x 64 packed"), ("c4-pkB-4kx8", "4K x 8 packed"), ("c4-pkB2-16kx2", "16K x 2 packed")]:
    s, l = load(n)
    ax[2].plot([off + x for x in s], l, label=lbl, lw=0.6)
    off += s[-1]
for n, lbl in [("c4-pkC-32k-dense", "32K dense"), ("c4-pkC-32k-online", "32K MTraining vs-online:0.9")]:
    s, l = load(n)
    ax[2].plot([off + x for x in s], l, label=lbl, lw=0.6)
ax[2].set_yscale("log"); ax[2].set_xlabel("step (stages end to end)")
ax[2].set_title("packed curriculum, keys loss (held-out exact match:\n79% at 512, 38% at 4K, 16% at 16K, 1% dense / 0% vs-online at 32K)", fontsize=9)
ax[2].legend(fontsize=7)
# call c7: PoSE to 32K on 512-token samples, then 40 steps at 32K, dense and MTraining side by side
for n, lbl in [("c4-pkA-512x64", "512 x 64, no PoSE (c4): 79% at 512"),
               ("c7-pkA-512x64", "512 x 64, --pose 32K (c7): 98.8% at 512, 91% zero-shot at 32K")]:
    s, l = load(n)
    ax[3].plot(s, l, label=lbl, lw=0.6)
off = s[-1]
for n, lbl in [("c7-pkC-32k-dense", "then 32K dense, lr 3e-5: 92% at 32K"),
               ("c7-pkC-32k-online", "then 32K MTraining vs-online:0.9: 73% at 32K")]:
    s, l = load(n)
    ax[3].plot([off + x for x in s], l, label=lbl, lw=0.9)
ax[3].set_yscale("log"); ax[3].set_xlabel("step")
ax[3].set_title("PoSE (held-out exact match in the legend)", fontsize=9)
ax[3].legend(fontsize=7)
# calls c8-c10: 512 x 64 with PoSE, 4K x 8 with PoSE, then 32K steps of 4 samples (lr 5e-5), stages end to end
def stages(a, runs, title):
    off = 0
    for n, lbl in runs[:2]:
        st, l = load(n)
        a.plot([off + x for x in st], l, label=lbl, lw=0.5)
        off += st[-1]
    for n, lbl, after in runs[2:]:
        st, l = load(n)
        a.plot([off + after + x for x in st], l, label=lbl, lw=1.0)
    a.set_yscale("log"); a.set_xlabel("step (stages end to end)"); a.set_title(title, fontsize=9); a.legend(fontsize=7)
stages(ax[4], [("c8-pkA-512x64", "512 x 64, PoSE, 3,400 steps: 99.6% at 512"), ("c8-pkB-4kx8", "4K x 8, PoSE, 300 steps: 98.0% at 512"),
               ("c8-pkC-32k-dense", "32K dense, 30 x 4 samples: 95.5% at 32K", 0),
               ("c8-pkC-32k-online-0.95", "32K MTraining vs-online:0.95, 30 x 4: 93.5%", 0)],
       "call c8 (held-out exact match at 32K, 200 samples, in the legend)")
# the 32K stages of c8-c10 on their own axis: dense and MTraining side by side (each point: 4 samples)
c10 = load("c10-pkC-32k-dense")[0][-1]
for n, lbl, off, sty in [("c8-pkC-32k-dense", "c8 dense: 95.5%", 0, "-"), ("c8-pkC-32k-online-0.95", "c8 vs-online:0.95: 93.5%", 0, "--"),
                         ("c9-pkC-32k-dense", "c9 dense: 100%", 0, "-"), ("c9-pkC-32k-online-0.95", "c9 vs-online:0.95: 12.5%", 0, "--"),
                         ("c10-pkC-32k-dense", "c10 dense: 99.0%", 0, "-"),
                         ("c10-pkD-32k-online-0.95", "c10 vs-online:0.95 from the dense model: 53% (30% before)", c10, "--")]:
    st, l = load(n)
    ax[5].plot([off + x for x in st], l, sty, label=lbl, lw=1.0)
ax[5].set_yscale("log"); ax[5].set_xlabel("32K step (4 samples each, lr 5e-5)")
ax[5].set_title("32K stages of calls c8-c10 (held-out exact match at 32K, 200 samples)", fontsize=9); ax[5].legend(fontsize=7)
# call c14: the recipe that meets the goal, stages end to end, dense and MTraining (forced sinks 64 + window 128)
stages(ax[6], [("c14-pkA-512x64", "512 x 64, PoSE, 3,000 steps: 100% at 512"), ("c14-pkB-4kx8", "4K x 8, PoSE, 300 steps: 100% at 512"),
               ("c14-pkC-32k-dense", "32K dense, 60 x 4 samples: 99.5% at 32K", 0),
               ("c14-pkC-32k-online-0.95-64-128", "32K MTraining vs-online:0.95:64:128, 60 x 4: 100% at 32K", 0)],
       "call c14: both >= 95% (held-out exact match at 32K, 200 samples)")
# the 32K stages of c12-c16: the estimate without (c12) and with the forced local window (c13, c14)
c13 = load("c13-pkC-32k-dense")[0][-1]
for n, lbl, off, sty in [("c12-pkC-32k-online-0.95", "c12 vs-online:0.95, no forced window: 50.5%", 0, ":"),
                         ("c13-pkC-32k-dense", "c13 dense, 30 steps: 92.5%", 0, "-"),
                         ("c13-pkC-32k-online-0.95-64-128", "c13 vs-online:0.95:64:128, 30 steps: 92.0%", 0, "--"),
                         ("c14-pkC-32k-dense", "c14 dense, 60 steps: 99.5%", 0, "-"),
                         ("c14-pkC-32k-online-0.95-64-128", "c14 vs-online:0.95:64:128, 60 steps: 100%", 0, "--"),
                         ("c15-pkC-32k-dense", "c15 (c14 repeated) dense: 92.0%", 0, "-"),
                         ("c15-pkC-32k-online-0.95-64-128", "c15 vs-online:0.95:64:128: 94.0%", 0, "--"),
                         ("c16-pkC-32k-dense", "c16 dense, 50 steps of 8: 98.5%", 0, "-"),
                         ("c16-pkC-32k-online-0.95-64-128", "c16 vs-online:0.95:64:128, 50 steps of 8: 99.0%", 0, "--")]:
    st, l = load(n)
    ax[7].plot([off + x for x in st], l, sty, label=lbl, lw=1.0)
ax[7].set_yscale("log"); ax[7].set_xlabel("32K step (4 samples each; c16: 8; lr 5e-5)")
ax[7].set_title("32K stages of calls c12-c16: forcing 64 sinks and 128 local diagonals\n(c13's dense model scored 92.0% under vs-online:0.95:64:128 untrained, c10's 30% without)", fontsize=9)
ax[7].legend(fontsize=7)
fig.tight_layout()
fig.savefig("results/train/passkey-h200.png", dpi=110)
