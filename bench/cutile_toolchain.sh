#!/bin/sh
# cuTile Python for `verdigris bench` on a machine without a package registry (the lent H200).
#
# Here, with pip:   sh bench/cutile_toolchain.sh pack DIR
#   downloads cuda-tile 1.7 (cp312) and CUDA 13.3's tileiras, libnvvm, libdevice and ptxas
#   (the parts tileiras runs; 200 MB unpacked, their wheels 200 MB) and packs the
#   toolchain into DIR/cutile_tools.tar.xz (54 MiB) beside the cuda-tile wheel.
# There:            sh bench/cutile_toolchain.sh unpack DIR
#   unpacks into /tmp/ctk and /tmp/ctsite and writes /tmp/ctwrap/tileiras, which runs the
#   real tileiras with CUDA_HOME set to that toolchain. Then run the suite with
#   PYTHONPATH=...:/tmp/ctsite and PATH=$PATH:/tmp/ctwrap (last: everything else keeps the
#   system's ptxas and libdevice, and CUDA_HOME stays unset).
set -e
dir=$2
case $1 in
pack)
  mkdir -p "$dir/wheels" "$dir/tree"
  for spec in cuda-tile==1.7.0 nvidia-cuda-tileiras==13.3.36 nvidia-cuda-nvcc==13.3.73 nvidia-nvvm==13.3.73; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux2014_x86_64 -d "$dir/wheels" "$spec"
  done
  (cd "$dir/tree" && unzip -qo ../wheels/nvidia_cuda_tileiras-*.whl 'nvidia/*' &&
   unzip -qo ../wheels/nvidia_nvvm-*.whl 'nvidia/cu13/lib/*' 'nvidia/cu13/nvvm/libdevice/*' &&
   unzip -qo ../wheels/nvidia_cuda_nvcc-*.whl 'nvidia/cu13/bin/ptxas' &&
   tar -cf - nvidia | xz -9e -T0 > ../cutile_tools.tar.xz)
  cp "$dir"/wheels/cuda_tile-*.whl "$dir/"
  rm -rf "$dir/wheels" "$dir/tree"
  ;;
unpack)
  if [ ! -x /tmp/ctk/nvidia/cu13/bin/tileiras ]; then
    mkdir -p /tmp/ctk
    python3 -c "import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" \
      "$dir/cutile_tools.tar.xz" /tmp/ctk
  fi
  [ -d /tmp/ctsite/cuda/tile ] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --target /tmp/ctsite "$dir"/cuda_tile-*.whl
  mkdir -p /tmp/ctwrap
  printf '#!/bin/sh\nexport CUDA_HOME=/tmp/ctk/nvidia/cu13 PATH=/tmp/ctk/nvidia/cu13/bin:$PATH\nexec /tmp/ctk/nvidia/cu13/bin/tileiras "$@"\n' > /tmp/ctwrap/tileiras
  chmod +x /tmp/ctwrap/tileiras
  ;;
*)
  echo "usage: $0 pack|unpack DIR" >&2
  exit 2
  ;;
esac
