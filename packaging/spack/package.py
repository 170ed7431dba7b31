# SPDX-License-Identifier: BSD-3-Clause
# Spack recipe for squall: compressed gradient all-reduce over NCCL and MPI.
#
# squall has no public release yet. At the first release, set `url` to the
# release tarball's address (pattern: <release folder>/squall-<version>.tar.gz)
# and give each version() its sha256. Until then the recipe builds the
# tarball that `make dist` makes, from a local file:
#   make dist && mkdir -p ~/squall-dist && cp squall-0.1.0.tar.gz ~/squall-dist/
#   spack repo add <a repo with packages/squall/package.py = this file>
#   spack install --no-checksum squall@0.1.0 [+mpi] [+cuda] [+nccl]
# tests/tree/spack-recipe.sh checks (without Spack) that every variant maps
# onto an option configure --help lists.
import os

from spack.package import *


class Squall(AutotoolsPackage):
    """Compresses the gradient all-reduce of data-parallel training (top-k
    with error feedback, fp16/bf16, int8/int4/fp8) before NCCL (device
    memory) or MPI (host memory) collectives."""

    # to be replaced by the release tarball's URL at the first release (above)
    url = "file://" + os.path.join(os.path.expanduser("~"), "squall-dist", "squall-0.1.0.tar.gz")

    license("BSD-3-Clause")

    version("0.1.0")

    variant("mpi", default=True, description="libsquall-mpi (squallMpiAllreduce), squall-bench and the MPI interposer")
    variant("cuda", default=False, description="the CUDA kernels (device buffers)")
    variant("nccl", default=False, description="libsquall-nccl (squallAllReduce) and the NCCL interposer")
    conflicts("+nccl", when="~cuda", msg="the NCCL path runs the CUDA kernels: +nccl needs +cuda")

    depends_on("c", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("zstd@1.4:")
    depends_on("check@0.10:", type="test")
    depends_on("mpi", when="+mpi")
    depends_on("cuda@12:", when="+cuda")
    depends_on("nccl", when="+nccl")

    def configure_args(self):
        spec = self.spec
        args = []
        if spec.satisfies("+mpi"):
            # configure asks the MPI's own compiler wrapper for its flags
            args.append("MPICC=" + spec["mpi"].mpicc)
        else:
            args.append("--without-mpi")
        if spec.satisfies("+cuda"):
            args.append("--with-cuda=" + spec["cuda"].prefix)
        else:
            args.append("--without-cuda")
        if spec.satisfies("+nccl"):
            args.append("--with-nccl=" + spec["nccl"].prefix)
        else:
            args.append("--without-nccl")
        return args
