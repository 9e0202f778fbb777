"""Kernels built as NPU command streams (:mod:`sw.kernels.linear`)."""
