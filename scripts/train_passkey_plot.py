#!/usr/bin/env python3
# passkey loss curves of the GPU calls (notebooks-data/train-h200-*.csv) into a PNG:
# the short-sequence recipes, the first 32K fine-tune, the packed curriculum (call c4) and PoSE (call c7)
# (exec/train_gpu_one.sh passkey; settings and results in docs/train.md)
import csv, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
def load(name):
    with open(f"notebooks-data/train-h200-{name}.csv") as f:
        r = list(csv.DictReader(f))
    return [int(x["step"]) for x in r], [float(x["loss"]) for x in r]
fig, axs = plt.subplots(2, 2, figsize=(13, 8))
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
fig.tight_layout()
fig.savefig("notebooks-data/train-passkey-h200.png", dpi=110)
