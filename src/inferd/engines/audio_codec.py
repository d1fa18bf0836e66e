"""Audio encoding with PyAV (FFmpeg): mono 16-bit PCM in, the speech route's formats out.

Every format is resampled to 24 kHz, the rate the OpenAI speech API answers in (its `pcm` is
raw 24 kHz 16-bit little-endian mono, so clients that play it assume that rate)."""

from __future__ import annotations

import io

import av
import numpy as np

OUTPUT_RATE = 24_000
# format -> (container, codec, Content-Type)
FORMATS: dict[str, tuple[str, str, str]] = {
    "mp3": ("mp3", "libmp3lame", "audio/mpeg"),
    "opus": ("ogg", "libopus", "audio/ogg"),
    "aac": ("adts", "aac", "audio/aac"),
    "flac": ("flac", "flac", "audio/flac"),
    "wav": ("wav", "pcm_s16le", "audio/wav"),
    "pcm": ("s16le", "pcm_s16le", "audio/pcm"),
}
_OPUS_RATE = 48_000  # libopus takes 48 kHz; players read the rate from the Ogg header


def _frames(samples: np.ndarray, rate: int, target_rate: int, target_format: str,
            layout: str = "mono") -> list[av.AudioFrame]:
    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout=layout)
    frame.sample_rate = rate
    resampler = av.AudioResampler(format=target_format, layout=layout, rate=target_rate)
    return [*resampler.resample(frame), *resampler.resample(None)]


def encode(pcm: bytes, sample_rate: int, audio_format: str) -> tuple[bytes, str]:
    """(encoded bytes, Content-Type) for mono int16 `pcm` at `sample_rate`."""
    container_name, codec_name, content_type = FORMATS[audio_format]
    samples = np.frombuffer(pcm, dtype="<i2")
    if audio_format == "pcm":
        frames = _frames(samples, sample_rate, OUTPUT_RATE, "s16")
        return b"".join(bytes(f.planes[0])[:f.samples * 2] for f in frames), content_type
    out = io.BytesIO()
    with av.open(out, mode="w", format=container_name) as container:
        rate = _OPUS_RATE if codec_name == "libopus" else OUTPUT_RATE
        stream = container.add_stream(codec_name, rate=rate)
        stream.layout = "mono"  # type: ignore[attr-defined]
        sample_format = stream.codec_context.codec.audio_formats[0].name  # type: ignore[attr-defined]
        frame_size = stream.codec_context.frame_size or 1024  # type: ignore[attr-defined]
        fifo = av.AudioFifo()
        for frame in _frames(samples, sample_rate, rate, sample_format):
            frame.pts = None
            fifo.write(frame)
        while fifo.samples:
            chunk = fifo.read(min(frame_size, fifo.samples), partial=True)
            for packet in stream.encode(chunk):  # type: ignore[attr-defined]
                container.mux(packet)
        for packet in stream.encode(None):  # type: ignore[attr-defined]
            container.mux(packet)
    return out.getvalue(), content_type


def decode_to_pcm(data: bytes, rate: int = 16_000) -> np.ndarray:
    """Any audio file's bytes as mono float32 samples at `rate` (for transcription and tests)."""
    with av.open(io.BytesIO(data)) as container:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        chunks = []
        for frame in container.decode(audio=0):
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray().reshape(-1))
        for out in resampler.resample(None):
            chunks.append(out.to_ndarray().reshape(-1))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


def audio_seconds(path: str, limit_s: float) -> float | None:
    """How long the first audio stream of the file at `path` plays, counted by decoding it a frame
    at a time and stopping as soon as it passes `limit_s` (so a long file is refused after at most
    `limit_s` of decoding, and no samples are kept). None when PyAV cannot read the file.

    Decoded samples are counted rather than the container's declared duration, which a file may
    state falsely; decoding costs about a second per hour of compressed audio."""
    try:
        container = av.open(path)
    except (av.FFmpegError, UnicodeDecodeError):
        return None
    seconds = 0.0
    with container:
        if not container.streams.audio:
            return None
        try:
            for frame in container.decode(audio=0):
                seconds += frame.samples / (frame.sample_rate or 1)
                if seconds > limit_s:
                    break
        except av.FFmpegError:
            pass  # damaged past this point: what was counted stands, and the engine judges the rest
    return seconds
