/* SPDX-License-Identifier: BSD-3-Clause */
/* cuda_pointer.h - whether a buffer handed to the MPI entry point is device
 * memory (cuda_pointer.c; built only with CUDA). */
#ifndef SQUALL_API_CUDA_POINTER_H
#define SQUALL_API_CUDA_POINTER_H

/* 1 when p is device memory the host cannot read (not managed memory);
 * asked of the CUDA driver only where the process has loaded it, never
 * creating a context. Tests replace it by defining their own. */
int squall__cuda_pointer_is_device(const void *p);

#endif /* SQUALL_API_CUDA_POINTER_H */
