# Source this on the lent GPU to make FlashInfer, FA3's forward (fa3-fwd) and cuDNN's frontend importable from one
# carried archive (no network there): . bench/h200/engines_setup.sh .whl
# The archive is the three wheels and apache-tvm-ffi unpacked, FlashInfer's bundled CUTLASS examples, tools and
# Python bindings left out (its JIT reads only the headers), xz-compressed: 24 MB instead of 61 MB of wheels, so it
# travels in one call beside the tree. Made here by:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#     flashinfer-python==0.6.18.post1 nvidia-cudnn-frontend==1.32.0 apache-tvm-ffi==0.1.15.post2 ; pip download --no-deps fa3-fwd==0.0.3
#   (unzip each; rm -r flashinfer/data/cutlass/{examples,python,tools} flashinfer/data/cccl/python; tar cf - ... | xz -9)
W=${1:-.whl}
if ! python3 -c "import fa3_fwd_interface, cudnn, flashinfer" 2>/dev/null; then
  mkdir -p /tmp/site && xz -dc "$W"/engines.tar.xz | tar xf - -C /tmp/site || return 1
  echo "import site; site.addsitedir('/tmp/site')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz_engines_site.pth"
fi
