"""The generated messages of the kubelet pod-resources API (api.proto beside this file)."""
