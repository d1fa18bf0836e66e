"""Audio encoding with PyAV (FFmpeg): mono 16-bit PCM in, the speech route's formats out.

Every format is resampled to 24 kHz, the rate the OpenAI speech API answers in (its `pcm` is
raw 24 kHz 16-bit little-endian mono, so clients that play it assume that rate)."""

from __future__ import annotations

import io
from typing import Any

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


class Encoder:
    """Encodes mono int16 PCM handed over in pieces (a sentence at a time, say): each piece is
    resampled and encoded as it comes, so only the encoded output grows, never the raw audio."""

    def __init__(self, sample_rate: int, audio_format: str) -> None:
        container_name, codec_name, self.content_type = FORMATS[audio_format]
        self._rate = sample_rate
        self._out = io.BytesIO()
        self._container: Any = None
        self._raw = audio_format == "pcm"
        if self._raw:  # raw samples: no container, no codec
            self._resampler = av.AudioResampler(format="s16", layout="mono", rate=OUTPUT_RATE)
            return
        self._container = av.open(self._out, mode="w", format=container_name)
        rate = _OPUS_RATE if codec_name == "libopus" else OUTPUT_RATE
        self._stream: Any = self._container.add_stream(codec_name, rate=rate)
        self._stream.layout = "mono"
        self._frame_size = self._stream.codec_context.frame_size or 1024
        self._fifo = av.AudioFifo()
        self._resampler = av.AudioResampler(format=self._stream.codec_context.codec.audio_formats[0].name,
                                            layout="mono", rate=rate)

    def write(self, pcm: bytes) -> None:
        """Encode one more piece of int16 samples at the encoder's input rate."""
        if not pcm:
            return
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm, dtype="<i2").reshape(1, -1), format="s16",
                                           layout="mono")
        frame.sample_rate = self._rate
        self._take(self._resampler.resample(frame), final=False)

    def finish(self) -> bytes:
        """The whole encoded audio, once the last piece is written."""
        self._take(self._resampler.resample(None), final=True)
        if not self._raw:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
        self.close()
        return self._out.getvalue()

    def close(self) -> None:
        """Release the container (finish() does; call it when giving up halfway)."""
        if self._container is not None:
            self._container.close()
            self._container = None

    def _take(self, frames: list[av.AudioFrame], final: bool) -> None:
        if self._raw:
            for frame in frames:
                self._out.write(bytes(frame.planes[0])[:frame.samples * 2])
            return
        for frame in frames:
            frame.pts = None  # the fifo hands out frames of the codec's size, timed by the muxer
            self._fifo.write(frame)
        # Whole codec frames as they fill; the remainder waits for the next piece (or the end).
        while self._fifo.samples >= self._frame_size or (final and self._fifo.samples):
            chunk = self._fifo.read(min(self._frame_size, self._fifo.samples), partial=True)
            for packet in self._stream.encode(chunk):
                self._container.mux(packet)


def encode(pcm: bytes, sample_rate: int, audio_format: str) -> tuple[bytes, str]:
    """(encoded bytes, Content-Type) for mono int16 `pcm` at `sample_rate`."""
    encoder = Encoder(sample_rate, audio_format)
    encoder.write(pcm)
    return encoder.finish(), encoder.content_type


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
