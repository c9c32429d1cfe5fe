#!/usr/bin/env python3
# one-off: passkey loss curves of the two GPU calls (notebooks-data/train-h200-*.csv) into a PNG
import csv, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
def load(name):
    with open(f"notebooks-data/train-h200-{name}.csv") as f:
        r = list(csv.DictReader(f))
    return [int(x["step"]) for x in r], [float(x["loss"]) for x in r]
fig, ax = plt.subplots(1, 2, figsize=(11, 4))
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
fig.tight_layout()
fig.savefig("notebooks-data/train-passkey-h200.png", dpi=110)
