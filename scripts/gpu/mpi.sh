# mpi.sh — sourced by the GPU run scripts (from the repository root): Open MPI for the GPU machine.
# Sets MPIRUN (the launcher) and MAKE_MPI (make arguments that build against it). The machine's own Open
# MPI when it has mpirun and mpicc; otherwise the Debian packages carried in $MPI_DEBS (default
# ../.gpu-exec-mpi, then .gpu-exec-mpi), unpacked once into /tmp/mpi and relocated with OPAL_PREFIX.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
# The executor's waits are bounded by 30 s by default; a first step at 512K builds plans for over a minute
# while its peers wait, so the GPU runs keep the bound they were measured with unless a script sets its own.
export SR_COMM_TIMEOUT=${SR_COMM_TIMEOUT:-120}
MAKE_MPI=()
MPIRUN=mpirun
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  _m=/tmp/mpi/usr
  if [ ! -x $_m/bin/orterun ]; then
    for _f in "${MPI_DEBS:-../.gpu-exec-mpi}"/*.deb .gpu-exec-mpi/*.deb; do [ -f "$_f" ] && dpkg -x "$_f" /tmp/mpi; done
  fi
  if [ -x $_m/bin/orterun ]; then
    export OPAL_PREFIX=$_m PATH=$_m/bin:$PATH
    export LD_LIBRARY_PATH=$_m/lib/x86_64-linux-gnu:$_m/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    MAKE_MPI=(CC="gcc -I$_m/lib/x86_64-linux-gnu/openmpi/include"
              LDLIBS="-lcjson -lgsl -lgslcblas -lm -lpthread -L$_m/lib/x86_64-linux-gnu/openmpi/lib -lmpi")
    MPIRUN=$_m/bin/orterun
    echo "mpi.sh: Open MPI from the carried packages ($_m)" >&2
  else
    echo "mpi.sh: no mpirun/mpicc here and no Open MPI packages in ${MPI_DEBS:-../.gpu-exec-mpi}" >&2
  fi
fi

# sr_exec_ready LOG: use a carried bin/sparsering-exec when it runs here (it answers a bad flag with exit
# status 2), else build it for sm_90a with the Open MPI above, output in LOG. Prints which; 0 when ready.
sr_exec_ready() {
  bin/sparsering-exec train-gpu-check --bogus >/dev/null 2>&1
  if [ $? -eq 2 ]; then echo "prebuilt bin/sparsering-exec"; return 0; fi
  echo "building bin/sparsering-exec"
  timeout 200 make -j"$(nproc)" "${MAKE_MPI[@]}" CUDA_ARCH="-gencode=arch=compute_90a,code=sm_90a" bin/sparsering-exec \
    >"$1" 2>&1
}
